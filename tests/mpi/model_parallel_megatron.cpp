// model_parallel_test's Megatron pairs (column- then row-parallel): on 2x4, 1x8, 4x2 and 8x1, the
// collectives a step runs against the plan, a relu's output gathered, and on 2x2.
#include "model_parallel_models.hpp"

namespace tessel::testing::model_parallel_models {
namespace {
void check_megatron_collectives(const array<float>& x, const array<float>& y) {
  megatron_block<model_parallel<megatron_map, "data">> m;
  m.compile({.loss = "categorical_crossentropy"});
  m.reset_communication_stats();
  m.train_on_batch(data::slice_rows(x, 0, batch), data::slice_rows(y, 0, batch));
  const communication_stats st = m.communication_stats();
  const std::size_t over_model = st.count(collective::all_reduce, "model");
  check(over_model == 2 && st.total_collectives() == st.count(collective::all_reduce, "data") + 2,
        "a Megatron pair runs one all_reduce over 'model' forward and one backward, got " +
            std::to_string(over_model) + " of " + std::to_string(st.total_collectives()));
  const model_plan& p = m.plan();
  const auto model_axis = static_cast<int>(p.mesh.index_of("model"));
  check(p.collectives(phase::forward, collective::all_reduce, model_axis) == 1 &&
            p.collectives(phase::backward, collective::all_reduce, model_axis) == 1,
        "the plan lists them: one forward, one backward");
}
}  // namespace

void megatron_pair_on_2x2(const data_set& pairs) {
  compare<megatron_model<model_parallel<megatron_map_of<2, 2>, "data">>,
          megatron_model<one_device>>("Megatron pair on 2x2", pairs.x, pairs.y, "adam");
}

void megatron_cases(const data_set& pairs) {
  compare<megatron_model<model_parallel<megatron_map, "data">>, megatron_model<one_device>>(
      "Megatron pair on 2x4", pairs.x, pairs.y);
  compare<megatron_model<model_parallel<megatron_map_of<1, 8>, "data">>,
          megatron_model<one_device>>("Megatron pair on 1x8", pairs.x, pairs.y);
  compare<megatron_model<model_parallel<megatron_map_of<4, 2>, "data">>,
          megatron_model<one_device>>("Megatron pair on 4x2", pairs.x, pairs.y);
  compare<megatron_model<model_parallel<megatron_map_of<8, 1>, "data">>,
          megatron_model<one_device>>("Megatron pair on 8x1", pairs.x, pairs.y);
  check_megatron_collectives(pairs.x, pairs.y);
  compare<megatron_model<model_parallel<megatron_map, "data">>, megatron_model<one_device>>(
      "Megatron pair on 2x4 with Adam", pairs.x, pairs.y, "adam");
  compare<relu_gather_model<model_parallel<relu_gather_map, "data">>,
          relu_gather_model<one_device>>("relu's output gathered on 2x4", pairs.x, pairs.y);
}

}  // namespace tessel::testing::model_parallel_models
