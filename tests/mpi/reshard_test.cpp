// Resharding executed (runtime/reshard.hpp): on a 2x2 mesh ("data" x "model", 4 processes), a
// (8, 12) tensor moved between layouts — gathers, slices, all-to-alls, and partial sums reduced or
// reduce-scattered — leaves on every process exactly its block of the new layout, and the
// collectives that ran are the plan's, step for step (kind, axis, dimensions, bytes).
#include <mpi.h>

#include <cstdio>
#include <string>
#include <tessel/runtime/reshard.hpp>
#include <tessel/tessel.hpp>
#include <vector>

#include "mpi_checks.hpp"

namespace {
using namespace tessel;
using tessel::testing::check;
using mesh = device_mesh<axis<"data", 2>, axis<"model", 2>>;
constexpr int batch_axis = 0, model = 1;
const shape_value global{8, 12};

float value_at(std::size_t r, std::size_t c) { return static_cast<float>(r * 12 + c) * 0.5f + 1; }

// The block of `l` at `coords`; when `l` is partial, the device with coordinate 0 on every partial
// axis holds the values and the others zeros, so the sum over those axes is the tensor.
std::vector<float> block_of(const layout_value& l, const std::array<std::size_t, max_mesh_rank>& c,
                            shape_value* local = nullptr) {
  const block b = shard_block(l.without_partial(), mesh::value, global, c);
  bool holder = true;
  for (std::uint8_t a = 0; a < 2; ++a)
    if ((l.partial >> a) & 1u) holder = holder && c[a] == 0;
  std::vector<float> v;
  for (std::size_t r = 0; r < b.extent[0]; ++r)
    for (std::size_t k = 0; k < b.extent[1]; ++k)
      v.push_back(holder ? value_at(b.offset[0] + r, b.offset[1] + k) : 0.0f);
  if (local != nullptr) *local = b.extent;
  return v;
}

layout_value lay(int d0, int d1, std::uint32_t partial = 0) {
  layout_value l = layout_value::replicated(2);
  if (d0 >= 0) l.dims[0].push(static_cast<std::uint8_t>(d0));
  if (d1 >= 0) l.dims[1].push(static_cast<std::uint8_t>(d1));
  l.partial = partial;
  return l;
}
}  // namespace

int main(int argc, char** argv) {
  initialize guard(argc, argv);
  try {
    const auto pm = process_mesh<mesh>::bind();
    std::array<std::size_t, max_mesh_rank> coords{};
    coords[0] = pm.coordinates()[0], coords[1] = pm.coordinates()[1];
    const int none = -1;
    const std::uint32_t over_model = 1u << model;
    struct move {
      const char* what;
      layout_value from, to;
      std::size_t collectives;  // that the plan lists
    };
    const std::vector<move> moves{
        {"gather the batch", lay(batch_axis, none), lay(none, none), 1},
        {"gather both dimensions", lay(batch_axis, model), lay(none, none), 2},
        {"slice a replicated tensor", lay(none, none), lay(batch_axis, model), 0},
        {"columns to rows", lay(none, model), lay(model, none), 1},
        {"swap the axes of the dimensions", lay(model, batch_axis), lay(batch_axis, model), 2},
        {"reduce a partial sum", lay(batch_axis, none, over_model), lay(batch_axis, none), 1},
        {"reduce-scatter a partial sum", lay(batch_axis, none, over_model), lay(batch_axis, model), 1},
    };
    std::vector<float> out, scratch;
    std::size_t collectives = 0;
    for (const move& m : moves) {
      const reshard_plan plan = plan_reshard(m.from, m.to, mesh::value, global);
      check(plan.ok, std::string(m.what) + ": a plan exists");
      std::size_t listed = 0;
      std::vector<collective_record> expected;
      for (const reshard_step& s : plan)
        if (s.kind != collective::slice) ++listed, expected.push_back(record_of(s));
      check(listed == m.collectives, std::string(m.what) + ": " + std::to_string(listed) +
                                         " collectives planned, expected " +
                                         std::to_string(m.collectives));
      shape_value local{};
      const std::vector<float> in = block_of(m.from, coords, &local);
      collective_log log;
      const shape_value result = run_reshard(pm, plan, local, std::span<const float>(in), out,
                                             scratch, &log);
      shape_value want_local{};
      const std::vector<float> want = block_of(m.to, coords, &want_local);
      check(result == want_local, std::string(m.what) + ": the new block's shape " +
                                      to_string(result) + ", expected " + to_string(want_local));
      check(out == want, std::string(m.what) + ": the new block holds the tensor's values there");
      check(log.records == expected,
            std::string(m.what) + ": the collectives run are the plan's (" +
                std::to_string(log.records.size()) + " run, " + std::to_string(expected.size()) +
                " planned)");
      collectives += log.records.size();
    }
    if (process_id() == 0)
      std::printf("reshard: %zu layout changes on a 2x2 mesh, %zu collectives run as planned\n",
                  moves.size(), collectives);
  } catch (const std::exception& e) {
    return guard.fail(e);
  }
  return tessel::testing::finish("reshard_test");
}
