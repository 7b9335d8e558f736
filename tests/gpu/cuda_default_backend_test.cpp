// In a program linked with tessel::cuda, tessel::sequential trains on the GPU (Keras picks the
// GPU by default). Not labeled gpu: it runs wherever the CUDA backend is built, with a GPU or
// without, and checks what each case must do. With a GPU: the model is on it and trains. Without
// one: building the model fails at once with CUDA's reason and what to do (train on the host, or
// build with TESSEL_FORCE_HOST; force_host_static.cpp checks that it then is the host).
#include <catch2/catch.hpp>

#include <string>
#include <tessel/tessel.hpp>
#include <type_traits>
#include <vector>

static_assert(std::is_same_v<tessel::default_backend, tessel::backend::cuda>,
              "a program linked with tessel::cuda defaults to the GPU");

TEST_CASE("cuda: tessel::sequential is on the GPU where there is one, and says what to do where "
          "there is none") {
  using namespace tessel::layers;
  using model_t = tessel::sequential<input<4>, dense<3, {.activation = "relu"}>, dense<2>>;
  static_assert(std::is_same_v<model_t::backend, tessel::backend::cuda>);
  if (tessel::backend::cuda::device_count() == 0) {
    try {
      model_t model;
      FAIL("a model on the GPU was built on a machine without one");
    } catch (const tessel::runtime_error& e) {
      REQUIRE_THAT(e.what(), Catch::Contains("no usable NVIDIA GPU here") &&
                                 Catch::Contains("backend::host") &&
                                 Catch::Contains("TESSEL_FORCE_HOST"));
    }
    REQUIRE(tessel::list_devices() == std::vector<std::string>{"cpu:0"});
    return;
  }
  model_t model;
  model.compile(tessel::optimizers::sgd{}, tessel::losses::mean_squared_error{});
  const tessel::array<float> x({8, 4}, std::vector<float>(32, 0.5f));
  const tessel::array<float> y({8, 2}, std::vector<float>(16, 1.0f));
  const double first = *tessel::find_log(model.train_on_batch(x, y), "loss");
  double last = first;
  for (int i = 0; i < 20; ++i) last = *tessel::find_log(model.train_on_batch(x, y), "loss");
  REQUIRE(last < first);
  REQUIRE(tessel::list_devices().front() == "gpu:0");
}
