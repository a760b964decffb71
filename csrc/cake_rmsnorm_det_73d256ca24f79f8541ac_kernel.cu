// Forward program for H = 2048.
#include "cake/forward.cuh"

CAKE_FORWARD_PROGRAM(2048)
