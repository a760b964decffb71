// Backward program for H = 256.
#include "cake/backward.cuh"

CAKE_BACKWARD_PROGRAM(256)
