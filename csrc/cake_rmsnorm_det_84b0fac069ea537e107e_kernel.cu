// Backward program for H = 1536.
#include "cake/backward.cuh"

CAKE_BACKWARD_PROGRAM(1536)
