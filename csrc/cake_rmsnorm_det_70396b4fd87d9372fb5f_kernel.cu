// Backward program for H = 512.
#include "cake/backward.cuh"

CAKE_BACKWARD_PROGRAM(512)
