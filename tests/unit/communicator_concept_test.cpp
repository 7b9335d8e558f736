// The model compiles against the communicator concept, not against MPI: a backend that names
// comm::local_communicator (one process, every collective a copy) as its communicator builds a
// sequential model whose mesh, gradient buckets and loss reduction all use it, and that model
// trains to the same weights as the default one (MPI's communicator, on one process).
#include <catch2/catch.hpp>

#include <algorithm>
#include <concepts>
#include <span>
#include <utility>
#include <vector>
#include <tessel/comm/local.hpp>
#include <tessel/tessel.hpp>

namespace {
using namespace tessel::layers;

struct host_without_mpi : tessel::default_backend {
  using communicator = tessel::comm::local_communicator;
};
template <class B>
using model = tessel::basic_sequential<B, tessel::one_device, input<4>,
                                       dense<8, {.activation = "relu"}>, dense<3>>;

static_assert(tessel::comm::communicator_like<tessel::comm::communicator>);
static_assert(tessel::comm::communicator_like<tessel::comm::local_communicator>);
static_assert(std::same_as<model<host_without_mpi>::communicator_type,
                           tessel::comm::local_communicator>);
static_assert(std::same_as<model<tessel::default_backend>::communicator_type,
                           tessel::comm::communicator>);
static_assert(std::same_as<std::remove_cvref_t<decltype(
                               std::declval<model<host_without_mpi>&>().mesh().template axis<0>())>,
                           tessel::comm::local_communicator>);
}  // namespace

TEST_CASE("communicator concept: a model on local_communicator trains as the default one",
          "[comm][model]") {
  tessel::array<float> x({32, 4});
  tessel::array<std::int32_t> y({32});
  for (std::size_t i = 0; i < x.size(); ++i) x.values[i] = static_cast<float>((i * 37) % 11) / 11;
  for (std::size_t i = 0; i < 32; ++i) y.values[i] = static_cast<std::int32_t>(i % 3);
  auto train = [&](auto& m) {
    m.compile("adam", tessel::losses::sparse_categorical_crossentropy{.from_logits = true},
              {"accuracy"});
    const auto h = m.fit(x, y, {.batch_size = 8, .epochs = 3, .verbose = 0, .shuffle = false});
    return std::pair{h.history.at("loss"), m.get_weights()};
  };
  model<host_without_mpi> local;
  model<tessel::default_backend> mpi;
  const auto [local_loss, local_weights] = train(local);
  const auto [mpi_loss, mpi_weights] = train(mpi);
  CHECK(local_loss == mpi_loss);
  CHECK(local_weights == mpi_weights);
  CHECK(local_loss.back() < local_loss.front());
  CHECK(local.predict(x).values == mpi.predict(x).values);
}

// runtime/collectives.hpp's steps copy through the communicator (its `copy`), never with the
// host's memmove: a communicator whose buffers live on a GPU (cuda_communicator) copies there.
// One that counts its copies shows every copy a step makes goes through it: an all_reduce into
// another buffer, a slice, blocking or not, and the step on a tensor's shape.
namespace {
struct copy_counting_communicator : tessel::comm::local_communicator {
  static inline std::vector<std::pair<const void*, const void*>> copies;
  template <class T>
  void copy(std::span<const T> in, std::span<T> out) const {
    copies.emplace_back(in.data(), out.data());
    local_communicator::copy(in, out);
  }
};
static_assert(tessel::comm::communicator_like<copy_counting_communicator>);
}  // namespace

TEST_CASE("collectives: a step's copies go through the communicator, which knows its memory",
          "[comm]") {
  using mesh = tessel::device_mesh<tessel::axis<"batch">>;
  using tessel::collective;
  const auto pm = tessel::process_mesh<mesh, copy_counting_communicator>::local();
  auto& copies = copy_counting_communicator::copies;
  const std::vector<float> in{1, 2, 3, 4, 5, 6};
  std::vector<float> out(6, 0.0f);
  const std::span<const float> src(in);
  const std::span<float> dst(out);
  const std::pair<const void*, const void*> in_to_out{in.data(), out.data()};

  copies.clear();
  tessel::comm::run_step(pm, tessel::reshard_step{.kind = collective::all_reduce}, src, dst);
  REQUIRE(copies.size() == 1);
  CHECK(copies[0] == in_to_out);
  CHECK(out == in);

  copies.clear();
  std::fill(out.begin(), out.end(), 0.0f);
  { auto r = tessel::comm::start_step(pm, tessel::reshard_step{.kind = collective::all_reduce},
                                      src, dst); r.wait(); }
  REQUIRE(copies.size() == 1);
  CHECK(out == in);

  copies.clear();
  std::fill(out.begin(), out.end(), 0.0f);
  tessel::comm::run_step(pm, tessel::reshard_step{.kind = collective::slice}, src, dst);
  REQUIRE(copies.size() == 1);  // the block of the one process: all of it
  CHECK(copies[0] == in_to_out);
  CHECK(out == in);

  copies.clear();
  std::fill(out.begin(), out.end(), 0.0f);
  const std::vector<std::size_t> shape{2, 3};
  std::vector<float> scratch;
  tessel::comm::run_step(pm, tessel::reshard_step{.kind = collective::all_reduce},
                         std::span<const std::size_t>(shape), src, dst, scratch);
  REQUIRE(copies.size() == 1);
  CHECK(out == in);

  // In place: nothing to copy.
  copies.clear();
  tessel::comm::run_step(pm, tessel::reshard_step{.kind = collective::all_reduce},
                         std::span<const float>(out), dst);
  CHECK(copies.empty());
}

TEST_CASE("collectives: a copy between spans of different sizes is an error naming both",
          "[comm]") {
  const std::vector<float> three{1, 2, 3};
  std::vector<float> two(2);
  const std::span<const float> in(three);
  const std::span<float> out(two);
  CHECK_THROWS_WITH(tessel::comm::communicator{}.copy(in, out),
                    "tessel: copy needs input and output of one size; got 3 and 2 elements");
  CHECK_THROWS_WITH(tessel::comm::local_communicator{}.copy(in, out),
                    Catch::Contains("copy over 1 process needs input and output of one size; "
                                    "got 3 and 2"));
  CHECK(two == std::vector<float>{0, 0});  // nothing written
}
