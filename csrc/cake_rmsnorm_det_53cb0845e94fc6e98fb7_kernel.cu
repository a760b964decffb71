// Forward program for H = 6144.
#include "cake/forward.cuh"

CAKE_FORWARD_PROGRAM(6144)
