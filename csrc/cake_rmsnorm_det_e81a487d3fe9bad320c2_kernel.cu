// Backward program for H = 2048.
#include "cake/backward.cuh"

CAKE_BACKWARD_PROGRAM(2048)
