// Backward program for H = 4096.
#include "cake/backward.cuh"

CAKE_BACKWARD_PROGRAM(4096)
