// layers: every layer tessel provides (Keras's keras.layers).
#pragma once

#include "layers/batch_normalization.hpp"
#include "layers/convolution.hpp"
#include "layers/dense.hpp"
#include "layers/elementwise.hpp"
#include "layers/layer_normalization.hpp"
#include "layers/merge.hpp"
#include "layers/plans.hpp"
