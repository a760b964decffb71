// Forward program for H = 512.
#include "cake/forward.cuh"

CAKE_FORWARD_PROGRAM(512)
