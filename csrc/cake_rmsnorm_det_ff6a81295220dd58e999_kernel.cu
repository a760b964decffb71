// Forward program for H = 4096.
#include "cake/forward.cuh"

CAKE_FORWARD_PROGRAM(4096)
