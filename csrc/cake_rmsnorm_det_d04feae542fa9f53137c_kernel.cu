// Forward program for H = 1536.
#include "cake/forward.cuh"

CAKE_FORWARD_PROGRAM(1536)
