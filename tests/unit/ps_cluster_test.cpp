// The parameter-server cluster's pure parts (ps/cluster.hpp, ps/partitioner.hpp): TF_CONFIG with
// chief, worker and ps roles, every malformed field named before anything connects; TensorFlow's
// partitioners, with the cases of TensorFlow's own tests; shards of shape[0] % n rows; and the
// placement of the shards on the ps tasks, balanced by bytes. (The tasks themselves run as
// separate processes in tests/ps.)
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>
#include <tessel/ps/backup_position.hpp>
#include <tessel/ps/cluster.hpp>
#include <tessel/ps/partitioner.hpp>
#include <vector>

#include "test_helpers.hpp"

using Catch::Matchers::Contains;
using tessel::testing::message_of;
namespace ps = tessel::ps;

namespace {
std::string config(const std::string& cluster, const std::string& task) {
  return R"({"cluster": )" + cluster + R"(, "task": )" + task + "}";
}
const std::string good_cluster =
    R"({"chief": ["c:2222"], "worker": ["w0:2222", "w1:2222"], "ps": ["p0:2222", "p1:2222"]})";
}  // namespace

TEST_CASE("ps TF_CONFIG: TensorFlow's form, each role and index", "[ps]") {
  const ps::cluster_spec c =
      ps::parse_cluster(config(good_cluster, R"({"type": "ps", "index": 1})"));
  CHECK(c.chief == std::vector<std::string>{"c:2222"});
  CHECK(c.worker.size() == 2);
  CHECK(c.num_ps() == 2);
  CHECK(c.task_type == ps::role::ps);
  CHECK(c.task_index == 1);
  CHECK(c.address() == "p1:2222");
  CHECK(ps::parse_cluster(config(good_cluster, R"({"type": "chief", "index": 0})")).address() ==
        "c:2222");
  CHECK(ps::parse_cluster(config(good_cluster, R"({"type": "worker", "index": 1})")).address() ==
        "w1:2222");
  CHECK(ps::cluster_spec::task_name(ps::role::worker, 3) == "worker 3");
}

TEST_CASE("ps TF_CONFIG: every malformed or inconsistent field is named", "[ps][error]") {
  const auto error = [](const std::string& text) {
    return message_of([&] { (void)ps::parse_cluster(text); });
  };
  const std::string task = R"({"type": "worker", "index": 0})";
  CHECK_THAT(error("not json"), Contains("TF_CONFIG: the value is not a JSON object"));
  CHECK_THAT(error(R"({"task": {}})"), Contains("'cluster' is missing or not an object"));
  CHECK_THAT(error(config(R"({"chief": ["c:1"], "worker": ["w:1"], "ps": ["p:1"],
                              "evaluator": ["e:1"]})",
                          task)),
             Contains("the cluster has 'evaluator' tasks"));
  CHECK_THAT(error(config(R"({"chief": ["c:1"], "worker": "w:1", "ps": ["p:1"]})", task)),
             Contains("'cluster.worker' is not a list of addresses"));
  CHECK_THAT(error(config(R"({"chief": ["c:1"], "worker": ["w"], "ps": ["p:1"]})", task)),
             Contains("'cluster.worker' holds \"w\", which is not an address \"host:port\""));
  CHECK_THAT(error(config(R"({"chief": ["c:1"], "worker": ["w:70000"], "ps": ["p:1"]})", task)),
             Contains("holds \"w:70000\""));
  CHECK_THAT(error(config(R"({"chief": ["c:1"], "worker": ["w:1"], "ps": ["w:1"]})", task)),
             Contains("the address 'w:1' is listed twice"));
  // Hosts ZeroMQ would refuse with "Invalid argument", named when TF_CONFIG is read.
  CHECK_THAT(error(config(R"({"chief": ["c:1"], "worker": ["my host:1"], "ps": ["p:1"]})", task)),
             Contains("'cluster.worker' holds \"my host:1\", which is not an address "
                      "\"host:port\": the host 'my host' is not a host name"));
  CHECK_THAT(error(config(R"({"chief": ["c:1"], "worker": ["caf\u00e9:1"], "ps": ["p:1"]})", task)),
             Contains("is not a host name"));
  CHECK_THAT(error(config(R"({"chief": ["c:1"], "worker": ["-w:1"], "ps": ["p:1"]})", task)),
             Contains("the host '-w' is not a host name"));
  CHECK_THAT(error(config(R"({"chief": ["c:1"], "worker": ["::1:1"], "ps": ["p:1"]})", task)),
             Contains("an IPv6 address is written in brackets, as \"[::1]:2222\""));
  CHECK_THAT(error(config(R"({"chief": ["c:1"], "worker": ["[::g]:1"], "ps": ["p:1"]})", task)),
             Contains("'::g' in brackets is not an IPv6 address"));
  CHECK_THAT(error(config(R"({"chief": ["c:1"], "worker": ["w:0"], "ps": ["p:1"]})", task)),
             Contains("the port '0' is not a number from 1 to 65535"));
  // IPv6 addresses in brackets are taken (the tasks bind and connect over IPv6).
  CHECK(ps::parse_cluster(config(R"({"chief": ["[::1]:1"], "worker": ["[::1]:2"], "ps": ["[::1]:3"]})",
                                 R"({"type": "ps", "index": 0})"))
            .address() == "[::1]:3");
  // Two spellings of one port of this machine: named before any task tries to listen there.
  CHECK_THAT(error(config(R"({"chief": ["c:1"], "worker": ["localhost:2345"], "ps": ["127.0.0.1:2345"]})",
                          task)),
             Contains("worker 0 (\"localhost:2345\") and ps 0 (\"127.0.0.1:2345\") are both port "
                      "2345 of this machine"));
  CHECK_THAT(error(config(R"({"chief": ["[::1]:2346"], "worker": ["w:1"], "ps": ["localhost:2346"]})",
                          task)),
             Contains("chief 0 (\"[::1]:2346\") and ps 0 (\"localhost:2346\") are both port 2346"));
  CHECK_THAT(error(config(R"({"worker": ["w:1"], "ps": ["p:1"]})", task)),
             Contains("'cluster.chief' lists 0 addresses; the cluster needs exactly one chief"));
  CHECK_THAT(error(config(R"({"chief": ["c:1", "d:1"], "worker": ["w:1"], "ps": ["p:1"]})", task)),
             Contains("'cluster.chief' lists 2 addresses"));
  CHECK_THAT(error(config(R"({"chief": ["c:1"], "ps": ["p:1"]})", task)),
             Contains("'cluster.worker' is missing or empty; the cluster needs a worker"));
  CHECK_THAT(error(config(R"({"chief": ["c:1"], "worker": ["w:1"]})", task)),
             Contains("'cluster.ps' is missing or empty; the cluster needs a parameter server"));
  CHECK_THAT(error(R"({"cluster": )" + good_cluster + "}"),
             Contains("'task' is missing or not an object"));
  CHECK_THAT(error(config(good_cluster, R"({"index": 0})")),
             Contains("'task.type' is missing or not a string"));
  CHECK_THAT(error(config(good_cluster, R"({"type": "evaluator", "index": 0})")),
             Contains("'task.type' is 'evaluator'; a task is the 'chief', a 'worker' or a 'ps'"));
  CHECK_THAT(error(config(good_cluster, R"({"type": "ps", "index": 2})")),
             Contains("'task.index' is 2, not an index into 'cluster.ps' (2 addresses)"));
  CHECK_THAT(error(config(good_cluster, R"({"type": "chief"})")),
             Contains("'task.index' is missing, not an index into 'cluster.chief' (1 address)"));
  // Every message says what the value must look like.
  CHECK_THAT(error("[]"), Contains("ParameterServerStrategy needs {\"cluster\": {\"chief\""));

  const char* saved = std::getenv("TF_CONFIG");
  const std::string keep = saved ? saved : "";
  ::unsetenv("TF_CONFIG");
  CHECK_THAT(message_of([] { (void)ps::cluster_from_environment(); }),
             Contains("TF_CONFIG is not set; ParameterServerStrategy learns each process's role "
                      "from it"));
  if (saved) ::setenv("TF_CONFIG", keep.c_str(), 1);
}

TEST_CASE("ps partitioners: TensorFlow's shard counts", "[ps]") {
  const std::vector<std::size_t> six{6, 1}, ten{10, 1};
  // FixedShardsPartitioner (TF's sharded_variable_test: [10, 1] over 2 shards -> 2).
  CHECK(ps::num_shards(ps::fixed_shards_partitioner{2}, ten) == 2);
  CHECK(ps::num_shards(ps::fixed_shards_partitioner{20}, ten) == 10);
  // MinSizePartitioner (TF: min_shard_bytes=4, max_shards=2 -> 2; max_shards=10 -> 6).
  CHECK(ps::num_shards(ps::min_size_partitioner{4, 2}, six) == 2);
  CHECK(ps::num_shards(ps::min_size_partitioner{4, 10}, six) == 6);
  CHECK(ps::num_shards(ps::min_size_partitioner{}, six) == 1);
  CHECK(ps::num_shards(ps::min_size_partitioner{.max_shards = 8}, {4096, 256}) == 8);
  CHECK(ps::num_shards(ps::min_size_partitioner{.max_shards = 8}, {512, 256}) == 2);
  // MaxSizePartitioner (TF: max_shard_bytes=4 -> 6; with max_shards=2 -> 2; 1024 -> 1).
  CHECK(ps::num_shards(ps::max_size_partitioner{4}, six) == 6);
  CHECK(ps::num_shards(ps::max_size_partitioner{4, 2}, six) == 2);
  CHECK(ps::num_shards(ps::max_size_partitioner{1024}, six) == 1);
  // A scalar is one shard; no partitioner, one shard.
  CHECK(ps::num_shards(ps::fixed_shards_partitioner{4}, {}) == 1);
  CHECK(ps::num_shards(ps::variable_partitioner{}, {4096, 256}) == 1);

  CHECK_THAT(message_of([] { (void)ps::num_shards(ps::fixed_shards_partitioner{0}, {4}); }),
             Contains("fixed_shards_partitioner: num_shards is 0"));
  CHECK_THAT(message_of([] {
               (void)ps::num_shards(ps::min_size_partitioner{4, 0}, {4});
             }),
             Contains("min_size_partitioner: max_shards is 0"));
  CHECK_THAT(message_of([] { (void)ps::num_shards(ps::max_size_partitioner{}, {4}); }),
             Contains("max_size_partitioner: max_shard_bytes is 0"));
}

TEST_CASE("ps shards: shape[0] % n shards get one more row", "[ps]") {
  CHECK(ps::shard_rows(13, 5) == std::vector<std::size_t>{3, 3, 3, 2, 2});
  CHECK(ps::shard_rows(12, 4) == std::vector<std::size_t>{3, 3, 3, 3});
  const ps::placement p = ps::place({{13, 2}}, {"v"}, ps::fixed_shards_partitioner{5}, 2);
  REQUIRE(p.shards.size() == 5);
  CHECK(p.shards[3].first_row == 9);
  CHECK(p.shards[3].rows == 2);
  CHECK(p.shards[3].values == 4);
  CHECK(p.shards[3].offset == 18);  // row 9 of rows of 2 values
}

TEST_CASE("ps placement: balanced by bytes, equal shards round-robin, printed", "[ps]") {
  // seeds/001's MLP: by count, 2 variables on each ps; by bytes the 784 x 256 kernel alone.
  const std::vector<std::vector<std::size_t>> shapes{{784, 256}, {256}, {256, 10}, {10}};
  const std::vector<std::string> names{"dense/kernel", "dense/bias", "dense_1/kernel",
                                       "dense_1/bias"};
  const ps::placement p = ps::place(shapes, names, {}, 2);
  CHECK(p.shards[0].ps == 0);
  CHECK(p.shards[1].ps == 1);
  CHECK(p.shards[2].ps == 1);
  CHECK(p.shards[3].ps == 1);
  CHECK(p.bytes_per_ps == std::vector<std::size_t>{784 * 256 * 4, (256 + 2560 + 10) * 4});
  // Partitioned into 4 shards, the kernel spreads: the two ps within one bias of each other.
  const ps::placement q = ps::place(shapes, names, ps::fixed_shards_partitioner{4}, 2);
  const auto a = static_cast<long long>(q.bytes_per_ps[0]);
  const auto b = static_cast<long long>(q.bytes_per_ps[1]);
  CHECK(std::llabs(a - b) <= 4 * 64 * 10);
  // Equal shards go round-robin.
  const ps::placement r = ps::place({{8, 8}}, {"v"}, ps::fixed_shards_partitioner{4}, 2);
  CHECK(r.shards[0].ps == 0);
  CHECK(r.shards[1].ps == 1);
  CHECK(r.shards[2].ps == 0);
  CHECK(r.shards[3].ps == 1);
  CHECK(r.shards_of(1) == std::vector<std::size_t>{1, 3});
  const std::string text = q.explain();
  CHECK_THAT(text, Contains("variables on 2 ps tasks:"));
  CHECK_THAT(text, Contains("dense/kernel"));
  CHECK_THAT(text, Contains("shard 3 rows 588-784 (196, 256)"));
  CHECK_THAT(text, Contains("ps 1 holds"));
  CHECK_THAT(message_of([] { (void)ps::place({{4}}, {"v"}, {}, 0); }), Contains("needs a ps task"));
}

TEST_CASE("ps backup position: every field checked, a bad one named with its file", "[ps][error]") {
  const ps::backup_point good{2, 32, 64, 1234, 0xdeadbeef};
  const std::string text = ps::position_text(good);
  const ps::backup_point read = ps::parse_position(text, "/b/position.json", 32, 3);
  CHECK(read.epochs_done == 2);
  CHECK(read.next_index == 64);
  CHECK(read.weights_bytes == 1234);
  CHECK(read.weights_crc32 == 0xdeadbeef);
  // A field replaced in the written text, and the words the refusal must hold.
  const auto refused = [&](const std::string& from, const std::string& to, std::uint64_t epochs,
                           const std::string& words) {
    std::string t = text;
    const auto at = t.find(from);
    REQUIRE(at != std::string::npos);
    t.replace(at, from.size(), to);
    const std::string why = message_of([&] { (void)ps::parse_position(t, "/b/position.json", 32, epochs); });
    CHECK_THAT(why, Contains("BackupAndRestore: /b/position.json: ") && Contains(words) &&
                        Contains("The backup is kept as it is"));
  };
  refused("\"epochs_done\":2", "\"epochs_done\":-1", 3, "'epochs_done' is -1, not a whole number");
  refused("\"epochs_done\":2", "\"epochs_done\":2.5", 3, "'epochs_done' is 2.5, not a whole number");
  refused("\"steps_per_epoch\":32", "\"steps_per_epoch\":\"256\"", 3,
          "'steps_per_epoch' is \"256\", not a whole number");
  refused("\"steps_per_epoch\":32", "\"steps_per_epoch\":16", 3,
          "'steps_per_epoch' is 16, this fit has 32 steps per epoch");
  refused("\"epochs_done\":2", "\"epochs_done\":18446744073709551615", 3,
          "'epochs_done' is 18446744073709551615, more than this fit's 3 epochs");
  refused("\"next_index\":64", "\"next_index\":63", 3, "'next_index' is 63, before the 64 batches");
  refused("\"next_index\":64", "\"next_ix\":64", 3, "'next_index' is missing");
  refused("\"crc32\":3735928559", "\"crc32\":4294967296", 3, "'weights.crc32' is 4294967296, more than 32 bits");
  refused("\"weights\":", "\"weight\":", 3, "'weights' is missing");
  CHECK_THAT(message_of([&] { (void)ps::parse_position("[1]", "/b/position.json", 32, 3); }),
             Contains("not a JSON object"));
  // A backup of as many epochs as the fit has is a fit that ended before its files were removed.
  CHECK(ps::parse_position(text, "/b/position.json", 32, 2).epochs_done == 2);
}
