// TF_CONFIG as multi_worker_mirrored_strategy reads it (strategy/strategy.hpp parse_tf_config):
// TensorFlow's form accepted (workers, a chief counted as worker 0), and every malformed field or
// disagreement with the launcher refused with a message naming it. (Read by the strategy on real
// processes: tests/mpi/strategy_test.cpp.)
#include <catch2/catch.hpp>

#include <string>
#include <tessel/tessel.hpp>

#include "test_helpers.hpp"

using Catch::Matchers::Contains;
using tessel::parse_tf_config;
using tessel::testing::message_of;

TEST_CASE("TF_CONFIG: TensorFlow's form, read and placed among the launcher's processes",
          "[strategy]") {
  const auto c = parse_tf_config(
      R"({"cluster": {"worker": ["host1:2222", "host2:2222"]})"
          R"(, "task": {"type": "worker", "index": 1}})",
      2, 1);
  CHECK(c.worker == std::vector<std::string>{"host1:2222", "host2:2222"});
  CHECK(c.chief.empty());
  CHECK(c.task_id() == 1);
  CHECK(c.num_workers() == 2);
  // A chief is worker 0; the workers follow it.
  const auto with_chief = parse_tf_config(
      R"({"cluster": {"chief": ["c:1"], "worker": ["w:1", "w:2"]})"
          R"(, "task": {"type": "worker", "index": 0}})",
      3, 1);
  CHECK(with_chief.task_id() == 1);
  CHECK(parse_tf_config(
            R"({"cluster": {"chief": ["c:1"], "worker": ["w:1"]})"
                R"(, "task": {"type": "chief", "index": 0}})",
            2, 0)
            .task_id() == 0);
}

TEST_CASE("TF_CONFIG: every malformed field is named, and so is a disagreement with the launcher",
          "[strategy]") {
  const auto error = [](const char* text, int processes = 2, int process = 0) {
    return message_of([&] { (void)parse_tf_config(text, processes, process); });
  };
  CHECK_THAT(error("worker"), Contains("TF_CONFIG: the value is not a JSON object") &&
                                  Contains("or leave TF_CONFIG unset"));
  CHECK_THAT(error(R"({"task": {}})"), Contains("'cluster' is missing or not an object"));
  CHECK_THAT(error(R"({"cluster": {"worker": ["a:1"], "ps": ["b:1"]})"
      R"(, "task": {"type": "worker", "index": 0}})"),
             Contains("the cluster has 'ps' tasks"));
  CHECK_THAT(error(R"({"cluster": {"worker": "a:1"}, "task": {}})"),
             Contains("'cluster.worker' is not a list of addresses"));
  CHECK_THAT(error(R"({"cluster": {"worker": ["a:1", 7]}, "task": {}})"),
             Contains("'cluster.worker' holds 7, which is not an address \"host:port\""));
  // The same address rules as the parameter servers' reader: ports from 1 to 65535, hosts a
  // resolver takes.
  CHECK_THAT(error(R"({"cluster": {"worker": ["a:0"]}, "task": {}})"),
             Contains("'cluster.worker' holds \"a:0\", which is not an address \"host:port\": the "
                      "port '0' is not a number from 1 to 65535"));
  CHECK_THAT(error(R"({"cluster": {"worker": ["a:70000"]}, "task": {}})"),
             Contains("the port '70000' is not a number from 1 to 65535"));
  CHECK_THAT(error(R"({"cluster": {"worker": ["a:11111111111111111111"]}, "task": {}})"),
             Contains("the port '11111111111111111111' is not a number from 1 to 65535"));
  CHECK_THAT(error(R"({"cluster": {"worker": ["my host:1"]}, "task": {}})"),
             Contains("the host 'my host' is not a host name"));
  CHECK_THAT(error(R"({"cluster": {"worker": ["a:1", "a:1"]}, "task": {}})"),
             Contains("the address 'a:1' is listed twice"));
  CHECK_THAT(error(R"({"cluster": {"chief": ["a:1", "b:1"]}, "task": {}})"),
             Contains("'cluster.chief' lists more than one address"));
  CHECK_THAT(error(R"({"cluster": {}, "task": {}})"), Contains("the cluster lists no worker"));
  CHECK_THAT(error(R"({"cluster": {"worker": ["a:1", "b:1"]}})"),
             Contains("'task' is missing or not an object"));
  CHECK_THAT(error(R"({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"index": 0}})"),
             Contains("'task.type' is missing or not a string"));
  CHECK_THAT(error(R"({"cluster": {"worker": ["a:1", "b:1"]})"
      R"(, "task": {"type": "ps", "index": 0}})"),
             Contains("'task.type' is 'ps'"));
  CHECK_THAT(error(R"({"cluster": {"worker": ["a:1", "b:1"]})"
      R"(, "task": {"type": "worker", "index": 2}})"),
             Contains("'task.index' is missing, or not an index into 'cluster.worker' (2 "
                      "addresses)"));
  CHECK_THAT(error(R"({"cluster": {"worker": ["a:1", "b:1"]})"
      R"(, "task": {"type": "worker", "index": -1}})"),
             Contains("'task.index'"));
  // Against the launcher: as many workers as processes, this process's task at its rank.
  CHECK_THAT(error(R"({"cluster": {"worker": ["a:1", "b:1", "c:1"]})"
      R"(, "task": {"type": "worker", "index": 0}})"),
             Contains("TF_CONFIG lists 3 workers (cluster.chief and cluster.worker), but the MPI "
                      "launcher started 2 processes"));
  CHECK_THAT(error(R"({"cluster": {"worker": ["a:1", "b:1"]})"
      R"(, "task": {"type": "worker", "index": 1}})",
                   2, 0),
             Contains("TF_CONFIG says this process is worker 1 (worker 1 of 2), but the MPI "
                      "launcher made it process 0 of 2"));
}
