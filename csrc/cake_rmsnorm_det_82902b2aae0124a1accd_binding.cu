// TVM-FFI binding of a backward program.
#include "cake/binding.cuh"

CAKE_BACKWARD_BINDING()
