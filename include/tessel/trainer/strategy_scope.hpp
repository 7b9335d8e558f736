// What a tf.distribute strategy (strategy/, above the trainer) tells the models it runs, on this
// thread: the gradient options of the open `strategy.scope()` (its communication_options'
// bytes_per_pack), which compile() takes, and whether the code runs inside `strategy.run`, where
// a batch is a replica's own rows of the global batch (TensorFlow's per-replica values).
#pragma once

#include "gradient_buckets.hpp"

namespace tessel::detail {

struct strategy_scope_state {
  const gradient_options* gradient = nullptr;  // the open scope's, if it sets any
  bool in_replica = false;                     // inside strategy.run
};
inline thread_local strategy_scope_state strategy_scope{};

}  // namespace tessel::detail
