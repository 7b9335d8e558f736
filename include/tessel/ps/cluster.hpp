#pragma once
// The cluster of a parameter-server job, as TensorFlow's ParameterServerStrategy reads it from
// TF_CONFIG: {"cluster": {"chief": ["host:port"], "worker": [...], "ps": [...]},
// "task": {"type": "ps", "index": 1}}. Each process is started on its own (by a cluster manager,
// or scripts/ps_cluster.sh for a local one) and learns its role here; nothing connects before the
// whole value has been checked.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "../core/errors.hpp"
#include "../runtime/address.hpp"
#include "compilation.hpp"

namespace tessel::ps {

// A task's role: the chief (the coordinator: it creates the variables, schedules the steps and
// saves checkpoints, and does not train), a worker (trains on its own batches), or a parameter
// server (holds variables and applies the optimizer to them).
enum class role { chief, worker, ps };

inline std::string_view role_name(role r) noexcept {
  return r == role::chief ? "chief" : r == role::worker ? "worker" : "ps";
}

// TF_CONFIG's cluster and this process's task.
struct cluster_spec {
  std::vector<std::string> chief, worker, ps;
  role task_type = role::chief;
  int task_index = 0;

  [[nodiscard]] const std::vector<std::string>& job(role r) const noexcept {
    return r == role::chief ? chief : r == role::worker ? worker : ps;
  }
  // "ps 1", as messages name a task.
  [[nodiscard]] static std::string task_name(role r, std::size_t index) {
    return std::string(role_name(r)) + " " + std::to_string(index);
  }
  [[nodiscard]] const std::string& address() const {
    return job(task_type)[static_cast<std::size_t>(task_index)];
  }
  [[nodiscard]] int num_workers() const noexcept { return static_cast<int>(worker.size()); }
  [[nodiscard]] int num_ps() const noexcept { return static_cast<int>(ps.size()); }
};

// TF_CONFIG's value parsed and checked: a value_error naming the field that is wrong.
TESSEL_PS_INLINE cluster_spec parse_cluster(std::string_view text);

// TF_CONFIG from the environment (a value_error when it is unset).
TESSEL_PS_INLINE cluster_spec cluster_from_environment();

#if TESSEL_PS_DEFINITIONS
// TF_CONFIG's value parsed and checked: a value_error naming the field that is wrong.
TESSEL_PS_INLINE cluster_spec parse_cluster(std::string_view text) {
  using json = nlohmann::json;
  const auto fail = [](const std::string& what) {
    throw value_error("TF_CONFIG: " + what +
                      ". ParameterServerStrategy needs {\"cluster\": {\"chief\": [\"host:port\"], "
                      "\"worker\": [\"host:port\", ...], \"ps\": [\"host:port\", ...]}, "
                      "\"task\": {\"type\": \"chief\" | \"worker\" | \"ps\", \"index\": i}}");
  };
  const json j = json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) fail("the value is not a JSON object");
  if (!j.contains("cluster") || !j["cluster"].is_object())
    fail("'cluster' is missing or not an object");
  cluster_spec c;
  std::vector<std::string> seen;
  for (const auto& [name, addresses] : j["cluster"].items()) {
    if (name != "chief" && name != "worker" && name != "ps")
      fail("the cluster has '" + name +
           "' tasks; a parameter-server cluster has a chief, workers and ps tasks only");
    if (!addresses.is_array()) fail("'cluster." + name + "' is not a list of addresses");
    auto& list = name == "chief" ? c.chief : name == "worker" ? c.worker : c.ps;
    for (const auto& a : addresses) {
      if (!a.is_string())
        fail("'cluster." + name + "' holds " + a.dump() +
             ", which is not an address \"host:port\"");
      const std::string address = a.get<std::string>();
      if (const auto [parsed, why] = runtime::parse_address(address); !parsed)
        fail("'cluster." + name + "' holds \"" + address + "\", which is not an address " +
             "\"host:port\": " + why);
      for (const std::string& s : seen)
        if (s == address) fail("the address '" + address + "' is listed twice");
      seen.push_back(address);
      list.push_back(address);
    }
  }
  std::vector<std::pair<std::string, std::string>> entries;
  for (const role r : {role::chief, role::worker, role::ps})
    for (std::size_t i = 0; i < c.job(r).size(); ++i)
      entries.emplace_back(cluster_spec::task_name(r, i), c.job(r)[i]);
  if (const auto clash = runtime::local_port_clash(entries)) fail(*clash);
  if (c.chief.size() != 1)
    fail("'cluster.chief' lists " + std::to_string(c.chief.size()) +
         " addresses; the cluster needs exactly one chief, the coordinator");
  if (c.worker.empty()) fail("'cluster.worker' is missing or empty; the cluster needs a worker");
  if (c.ps.empty()) fail("'cluster.ps' is missing or empty; the cluster needs a parameter server");
  if (!j.contains("task") || !j["task"].is_object()) fail("'task' is missing or not an object");
  const json& task = j["task"];
  if (!task.contains("type") || !task["type"].is_string())
    fail("'task.type' is missing or not a string");
  const std::string type = task["type"].get<std::string>();
  if (type != "chief" && type != "worker" && type != "ps")
    fail("'task.type' is '" + type + "'; a task is the 'chief', a 'worker' or a 'ps'");
  c.task_type = type == "chief" ? role::chief : type == "worker" ? role::worker : role::ps;
  const auto& listed = c.job(c.task_type);
  if (!task.contains("index") || !task["index"].is_number_integer() ||
      task["index"].get<std::int64_t>() < 0 ||
      task["index"].get<std::int64_t>() >= static_cast<std::int64_t>(listed.size()))
    fail("'task.index' is " + (task.contains("index") ? task["index"].dump() : "missing") +
         ", not an index into 'cluster." + type + "' (" + std::to_string(listed.size()) +
         (listed.size() == 1 ? " address)" : " addresses)"));
  c.task_index = static_cast<int>(task["index"].get<std::int64_t>());
  return c;
}

// TF_CONFIG from the environment (a value_error when it is unset).
TESSEL_PS_INLINE cluster_spec cluster_from_environment() {
  const char* text = std::getenv("TF_CONFIG");
  if (text == nullptr)
    throw value_error(
        "TF_CONFIG is not set; ParameterServerStrategy learns each process's role from it. "
        "Start the processes with scripts/ps_cluster.sh, or give each its TF_CONFIG");
  return parse_cluster(text);
}

#endif

}  // namespace tessel::ps
