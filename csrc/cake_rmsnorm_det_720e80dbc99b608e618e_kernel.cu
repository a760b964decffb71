// Backward program for H = 6144.
#include "cake/backward.cuh"

CAKE_BACKWARD_PROGRAM(6144)
