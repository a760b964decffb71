// Forward program for H = 256.
#include "cake/forward.cuh"

CAKE_FORWARD_PROGRAM(256)
