// Backward program for any width (a multiple of 8 up to 16384), layout read at run time.
#include "cake/backward.cuh"

CAKE_BACKWARD_PROGRAM(0)
