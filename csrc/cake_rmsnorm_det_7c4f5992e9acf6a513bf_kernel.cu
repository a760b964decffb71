// Backward program for H = 5120.
#include "cake/backward.cuh"

CAKE_BACKWARD_PROGRAM(5120)
