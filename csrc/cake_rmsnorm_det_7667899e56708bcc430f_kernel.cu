// Forward program for H = 5120.
#include "cake/forward.cuh"

CAKE_FORWARD_PROGRAM(5120)
