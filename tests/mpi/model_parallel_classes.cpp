// model_parallel_test's classifiers whose class dimension stays split across "model": the
// vocab-parallel softmax, the cross-entropies on logits and on probabilities, squared error.
#include "model_parallel_models.hpp"

namespace tessel::testing::model_parallel_models {

void split_class_cases() {
  // Classes split across "model": the vocab-parallel softmax, losses and accuracy.
  const data_set classes = make_data(64, 32, 8);
  const array<std::int32_t> labels = argmax_labels(classes.y);
  using sharded_split = model_parallel<split_map, "data">;
  compare<split_softmax_model<sharded_split>, split_softmax_model<one_device>>(
      "softmax over split classes, squared error", classes.x, classes.y);
  compare<split_softmax_model<sharded_split>, split_softmax_model<one_device>>(
      "softmax over split classes, categorical_crossentropy", classes.x, classes.y, "adam",
      "categorical_crossentropy");
  compare<split_softmax_model<sharded_split>, split_softmax_model<one_device>>(
      "softmax over split classes, sparse_categorical_crossentropy", classes.x, labels, "rmsprop",
      "sparse_categorical_crossentropy");
  compare<split_logits_model<sharded_split>, split_logits_model<one_device>>(
      "split logits, sparse_categorical_crossentropy(from_logits)", classes.x, labels, "adam",
      losses::sparse_categorical_crossentropy{.from_logits = true});
  compare<split_logits_model<sharded_split>, split_logits_model<one_device>>(
      "split logits, categorical_crossentropy(from_logits)", classes.x, classes.y, "rmsprop",
      losses::categorical_crossentropy{.from_logits = true});
  compare<split_softmax_layer_model<sharded_split>, split_softmax_layer_model<one_device>>(
      "a Softmax layer over split classes", classes.x, labels, "rmsprop",
      "sparse_categorical_crossentropy");
  compare<split_softmax_model<model_parallel<split_map_3d, "data">>,
          split_softmax_model<one_device>>("classes split over two axes on 2x2x2", classes.x,
                                           labels, "rmsprop", "sparse_categorical_crossentropy");
}

}  // namespace tessel::testing::model_parallel_models
