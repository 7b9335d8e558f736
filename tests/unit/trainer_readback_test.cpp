// The trainer works on a model concept, and a training step reads the device back once: the
// loss and metric sums stay in the backend's memory until the step's end. A backend that counts
// its read-backs shows it (on a GPU each would be a device synchronisation).
#include <catch2/catch.hpp>

#include <concepts>
#include <cstdint>
#include <span>
#include <tessel/tessel.hpp>

namespace {
using namespace tessel::layers;

struct counting_host : tessel::default_backend {
  using base = tessel::default_backend;
  static inline std::size_t sum_reads = 0, matrix_reads = 0;
  static void download(const base::sums& s, std::span<double> out) {
    ++sum_reads;
    base::download(s, out);
  }
  static void download(const base::matrix& m, std::span<float> out) {
    ++matrix_reads;
    base::download(m, out);
  }
};
static_assert(tessel::backend::backend_interface<counting_host>);
static_assert(tessel::trainable_model<tessel::sequential_model<
                  counting_host, tessel::one_device, input<4>, dense<3>>>);
using model = tessel::basic_sequential<counting_host, tessel::one_device, input<4>,
                                       dense<8, {.activation = "relu"}>, dense<3>>;
static_assert(std::derived_from<model,
                                tessel::sequential_model<counting_host, tessel::one_device,
                                                         input<4>, dense<8, {.activation = "relu"}>,
                                                         dense<3>>>);
}  // namespace

TEST_CASE("trainer: a training step reads the device back once, for every sum at once",
          "[trainer][backend]") {
  tessel::array<float> x({16, 4});
  tessel::array<std::int32_t> y({16});
  for (std::size_t i = 0; i < x.size(); ++i) x.values[i] = static_cast<float>((i * 7) % 5) / 5;
  for (std::size_t i = 0; i < 16; ++i) y.values[i] = static_cast<std::int32_t>(i % 3);
  model m;
  m.compile("sgd", tessel::losses::sparse_categorical_crossentropy{.from_logits = true},
            {"accuracy", "sparse_categorical_accuracy"});
  counting_host::sum_reads = counting_host::matrix_reads = 0;
  const auto logs = m.train_on_batch(x, y);
  CHECK(counting_host::sum_reads == 1);     // the loss and both metrics, together
  CHECK(counting_host::matrix_reads == 0);  // no activation, gradient or weight comes back
  CHECK(logs.size() == 3);
  m.evaluate(x, y, 4, 0);
  CHECK(counting_host::sum_reads == 1 + 4);  // one per batch
}
