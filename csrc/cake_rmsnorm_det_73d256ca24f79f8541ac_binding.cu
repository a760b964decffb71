// TVM-FFI binding of a forward program.
#include "cake/binding.cuh"

CAKE_FORWARD_BINDING()
