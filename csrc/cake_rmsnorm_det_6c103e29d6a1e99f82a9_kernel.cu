// Forward program for any width (a multiple of 8 up to 16384), layout read at run time.
#include "cake/forward.cuh"

CAKE_FORWARD_PROGRAM(0)
