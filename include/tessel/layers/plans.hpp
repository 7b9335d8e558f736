// The planning rules of tessel's layers, for planning a model described by op_descs
// (describe_model, plan_model, explain) without the layers' run-time code.
#pragma once

#include "plan/batch_normalization.hpp"
#include "plan/convolution.hpp"
#include "plan/dense.hpp"
#include "plan/elementwise.hpp"
#include "plan/merge.hpp"
#include "plan/normalization.hpp"
