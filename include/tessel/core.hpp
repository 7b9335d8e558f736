// The compile-time core of tessel: meshes, layouts, layout maps, planner. Standard library only.
#pragma once

#include "core/activations.hpp"
#include "core/axis.hpp"
#include "core/device_mesh.hpp"
#include "core/diagnostics.hpp"
#include "core/distribution.hpp"
#include "core/errors.hpp"
#include "core/fixed_string.hpp"
#include "core/layout_map.hpp"
#include "core/model_plan.hpp"
#include "core/planner.hpp"
#include "core/propagation.hpp"
#include "core/regex.hpp"
#include "core/shape.hpp"
#include "core/shard.hpp"
#include "core/tensor_layout.hpp"
#include "core/visualize_sharding.hpp"
