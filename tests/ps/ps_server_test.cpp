// A ps task's request handling (ps/server.hpp), driven directly, without sockets: create, pull,
// push applied once per batch, requests before create answered `empty` (the ps lost), a push
// from before the variables were created again refused (its generation), staleness, state and
// restore, and the failures named; every malformed request (sizes, optimizer, shapes,
// non-finite gradients, frames at odd addresses) refused whole, changing nothing.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <tessel/ps.hpp>
#include <tessel/tessel.hpp>
#include <vector>

namespace {
namespace ps = tessel::ps;
int failures = 0;
void check(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAILED", what.c_str());
  if (!ok) ++failures;
}

ps::message request(ps::kind k, std::uint64_t a = 0, std::uint64_t b = 0, std::uint64_t c = 0) {
  ps::message m;
  m.h.what = k;
  m.h.a = a;
  m.h.b = b;
  m.h.c = c;
  return m;
}
// Two shards: "w/shard_0" (2, 2) and "w/shard_1" (1, 2), SGD with learning rate 0.5.
ps::message create(std::uint64_t generation) {
  ps::message m = request(ps::kind::create, generation);
  const nlohmann::json d = {
      {"optimizer",
       ps::optimizer_json(tessel::optimizers::config_of(tessel::optimizers::sgd{0.5, 0.0, false}))},
      {"shards",
       {{{"path", "w/shard_0"}, {"shape", {2, 2}}}, {{"path", "w/shard_1"}, {"shape", {1, 2}}}}}};
  m.frames.push_back(ps::frame_of(d.dump()));
  const std::vector<float> a{1, 2, 3, 4}, b{5, 6};
  m.frames.push_back(ps::frame_of(std::span<const float>(a)));
  m.frames.push_back(ps::frame_of(std::span<const float>(b)));
  return m;
}
ps::message push(std::uint64_t batch, std::uint64_t generation, std::uint64_t version,
                 std::size_t shards = 2) {
  ps::message m = request(ps::kind::push, batch, generation, version);
  const std::vector<float> g0{1, 1, 1, 1}, g1{2, 2};
  m.frames.push_back(ps::frame_of(std::span<const float>(g0)));
  if (shards > 1) m.frames.push_back(ps::frame_of(std::span<const float>(g1)));
  return m;
}
std::vector<float> values(const ps::message& r, std::size_t frame) {
  return ps::frame_floats(r.frames[frame]).to_vector();
}
std::string text(const ps::message& r) {
  return r.h.what == ps::kind::failed ? ps::text_of(r.frames[0]) : "";
}
// A frame holding `v` at an odd address, as ZeroMQ hands out a frame inside its receive buffer:
// reading its floats in place would be a misaligned load (UBSan reports it).
zmq::message_t misaligned(std::span<const float> v) {
  auto* buffer = new unsigned char[v.size_bytes() + 1];
  std::memcpy(buffer + 1, v.data(), v.size_bytes());
  return zmq::message_t(
      buffer + 1, v.size_bytes(),
      [](void*, void* hint) { delete[] static_cast<unsigned char*>(hint); }, buffer);
}
ps::message push_of(std::uint64_t batch, std::uint64_t worker, const std::vector<float>& g0,
                    const std::vector<float>& g1, bool odd = false) {
  ps::message m = request(ps::kind::push, batch, 1, 0);
  m.h.d = worker + 1;
  m.frames.push_back(odd ? misaligned(g0) : ps::frame_of(std::span<const float>(g0)));
  m.frames.push_back(odd ? misaligned(g1) : ps::frame_of(std::span<const float>(g1)));
  return m;
}
std::vector<std::vector<float>> all_values(ps::parameter_server& server) {
  bool stop = false;
  const ps::message r = server.handle(request(ps::kind::pull), stop);
  std::vector<std::vector<float>> out;
  for (std::size_t i = 0; i < r.frames.size(); ++i) out.push_back(values(r, i));
  return out;
}

// Every message is checked whole before it changes anything: a refused one leaves the ps as it
// was and is answered with the reason.
void refusals() {
  ps::parameter_server server;
  bool stop = false;
  auto handle = [&](ps::message m) { return server.handle(m, stop); };
  handle(create(1));
  const auto before = all_values(server);

  // A push whose frames have the wrong sizes: refused, and its batch is not recorded, so the
  // worker's real push of that batch is applied.
  std::string why = text(handle(push_of(5, 0, {1, 1, 1}, {2, 2})));
  check(why.find("push of batch 5 from worker 0: the gradient of w/shard_0 has 12 bytes, the shard "
                 "4 values") != std::string::npos,
        "a push with a gradient of the wrong size is refused, naming it: " + why);
  check(all_values(server) == before && server.applied() == 0, "  and changes nothing");
  check(handle(push_of(5, 0, {1, 1, 1, 1}, {2, 2})).h.b == 1,
        "  the real push of the same batch is then applied, not refused as a repeat");
  const auto after_one = all_values(server);

  // Non-finite gradients: refused naming the worker and the batch; nothing applied, the batch
  // not recorded.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  why = text(handle(push_of(6, 1, {1, 1, 1, 1}, {2, nan})));
  check(why.find("push of batch 6 from worker 1: the gradient of w/shard_1 holds NaN at value 1 "
                 "of 2") != std::string::npos,
        "a NaN gradient is refused, naming the worker, the batch and the value: " + why);
  why = text(handle(push_of(6, 1, {1, -inf, 1, 1}, {2, 2})));
  check(why.find("w/shard_0 holds -inf at value 1 of 4") != std::string::npos,
        "an infinite gradient is refused: " + why);
  check(all_values(server) == after_one && server.applied() == 1 && server.version() == 1,
        "  neither changed a variable or the version");
  check(handle(push_of(6, 1, {0, 0, 0, 0}, {0, 0})).h.b == 1,
        "  and the batch's finite push is applied after them");

  // A create whose optimizer does not parse, or whose shapes do not fit its frames: the ps keeps
  // its variables (before, the store was cleared first and the ps held nothing).
  const auto held = all_values(server);
  const auto bad_create = [&](nlohmann::json optimizer, nlohmann::json shape) {
    ps::message m = request(ps::kind::create, 9);
    const nlohmann::json d = {{"optimizer", optimizer},
                              {"shards", {{{"path", "v"}, {"shape", shape}}}}};
    m.frames.push_back(ps::frame_of(d.dump()));
    const std::vector<float> v{1, 2};
    m.frames.push_back(ps::frame_of(std::span<const float>(v)));
    return text(handle(std::move(m)));
  };
  const nlohmann::json sgd =
      ps::optimizer_json(tessel::optimizers::config_of(tessel::optimizers::sgd{0.5, 0.0, false}));
  nlohmann::json unknown = sgd, wrong_type = sgd, out_of_range = sgd;
  unknown["class_name"] = "Lamb";
  wrong_type["config"][0][1] = "0.5";
  out_of_range["config"][1][1] = 2;
  why = bad_create(unknown, {2});
  check(why.find("create: the optimizer 'Lamb' is not one this program knows") != std::string::npos,
        "create with an unknown optimizer is refused: " + why);
  why = bad_create(wrong_type, {2});
  check(why.find("the optimizer's 'learning_rate' is \"0.5\", not a finite number") !=
            std::string::npos,
        "create with a learning rate of the wrong type is refused: " + why);
  why = bad_create(out_of_range, {2});
  check(why.find("create: SGD's momentum is 2; it must be in [0, 1]") != std::string::npos,
        "create with a momentum out of range is refused: " + why);
  why = bad_create(sgd, {3});
  check(why.find("shard 'v' has 3 values, 8 bytes sent") != std::string::npos,
        "create whose shape does not fit its frame is refused: " + why);
  why = bad_create(sgd, {-2});
  check(why.find("the shape holds -2, not a size") != std::string::npos,
        "create with a negative dimension is refused: " + why);
  why = bad_create(sgd, {1ull << 40, 1ull << 40});
  check(why.find("holds no values, or more than a frame can") != std::string::npos,
        "create whose shape overflows is refused: " + why);
  check(all_values(server) == held && server.generation() == 1,
        "  none of them changed the variables or the generation");

  // restore with one frame of the wrong size changes nothing (the values were assigned first).
  const ps::message st = handle(request(ps::kind::state));
  ps::message back = request(ps::kind::restore, 0);
  back.frames.push_back(zmq::message_t(st.frames[0].data(), st.frames[0].size()));
  const std::vector<float> zeros4(4, 0.0f), zeros3(3, 0.0f);
  back.frames.push_back(ps::frame_of(std::span<const float>(zeros4)));
  back.frames.push_back(ps::frame_of(std::span<const float>(zeros3)));
  why = text(handle(std::move(back)));
  check(why.find("restore: shard 'w/shard_1' has 2 values, 12 bytes sent") != std::string::npos,
        "restore with a frame of the wrong size is refused: " + why);
  check(all_values(server) == held, "  and changes no value");

  // Frames at odd addresses (as ZeroMQ hands them out) are read by copying, not in place: under
  // UBSan a load of a misaligned float would fail this test.
  check(handle(push_of(7, 0, {0.5f, 0.5f, 0.5f, 0.5f}, {1, 1}, true)).h.b == 1,
        "a push whose frames lie at odd addresses is applied");
  const auto moved = all_values(server);
  check(moved[1] == std::vector<float>{held[1][0] - 0.5f, held[1][1] - 0.5f},
        "  with its values (SGD, learning rate 0.5)");

  // A request of a kind a ps does not know.
  ps::message odd_kind = request(static_cast<ps::kind>(77));
  why = text(handle(std::move(odd_kind)));
  check(why == "a ps task does not handle requests of kind 77",
        "an unknown kind is refused: " + why);
}
}  // namespace

// The optimizer a ps makes from the chief's description applies its weight decay by the
// variables' names, the shards' suffix aside: AdamW with the biases excluded, one push of zero
// gradients (Adam's step is then 0) decays the kernel's shard by w * wd * lr and leaves the bias.
// A user's optimizer the program did not register is refused, naming it.
void weight_decay_on_a_ps() {
  ps::parameter_server server;
  bool stop = false;
  auto handle = [&](ps::message m) { return server.handle(m, stop); };
  tessel::optimizers::config adamw = tessel::optimizers::config_of(
      tessel::optimizers::adamw{.learning_rate = 0.1, .weight_decay = 0.5});
  adamw.exclude_from_weight_decay = {"bias"};
  ps::message m = request(ps::kind::create, 1);
  const nlohmann::json d = {{"optimizer", ps::optimizer_json(adamw)},
                            {"shards",
                             {{{"path", "dense/kernel/shard_0"}, {"shape", {2}}},
                              {{"path", "dense/bias/shard_0"}, {"shape", {2}}}}}};
  m.frames.push_back(ps::frame_of(d.dump()));
  const std::vector<float> kernel{1, -2}, bias{3, 4}, zeros{0, 0};
  m.frames.push_back(ps::frame_of(std::span<const float>(kernel)));
  m.frames.push_back(ps::frame_of(std::span<const float>(bias)));
  check(handle(std::move(m)).h.what == ps::kind::create, "create with AdamW, biases excluded");
  check(handle(push_of(0, 0, zeros, zeros)).h.b == 1, "  a push of zero gradients applied");
  const auto now = all_values(server);
  const float decay = 1.0f - 0.5f * 0.1f;
  check(std::fabs(now[0][0] - 1.0f * decay) < 1e-6f && std::fabs(now[0][1] + 2.0f * decay) < 1e-6f,
        "  the kernel's shard decayed by w * wd * lr (" + std::to_string(now[0][0]) + ")");
  check(now[1] == bias, "  the bias's shard, excluded by its variable's name, did not");

  tessel::optimizers::config unknown = adamw;
  unknown.class_name = "Signum";
  ps::message u = request(ps::kind::create, 2);
  const nlohmann::json du = {{"optimizer", ps::optimizer_json(unknown)},
                             {"shards", {{{"path", "v"}, {"shape", {2}}}}}};
  u.frames.push_back(ps::frame_of(du.dump()));
  u.frames.push_back(ps::frame_of(std::span<const float>(zeros)));
  const std::string why = text(handle(std::move(u)));
  check(why.find("the optimizer 'Signum' is not one this program knows") != std::string::npos &&
            why.find("register_optimizer") != std::string::npos,
        "an optimizer this program did not register is refused, naming it: " + why);
}

int main(int argc, char** argv) {
  tessel::initialize guard(argc, argv);
  ps::parameter_server server;
  bool stop = false;
  auto handle = [&](ps::message m) { return server.handle(m, stop); };

  // A ps that holds no variables (one started again in place of a lost one) answers `empty` to
  // every request that needs them, and the connection reads that as the ps lost, naming it.
  {
    bool none = true;
    for (const ps::kind k : {ps::kind::push, ps::kind::pull, ps::kind::state, ps::kind::restore})
      none = none &&
             handle(k == ps::kind::push ? push(0, 1, 0) : request(k)).h.what == ps::kind::empty;
    check(none, "push, pull, state and restore before create are answered `empty`");
    std::string why;
    try {
      (void)ps::checked(handle(push(0, 1, 0)), "ps 1 at 127.0.0.1:9");
    } catch (const ps::task_lost& e) {
      why = e.what();
    }
    check(why ==
              "ps 1 at 127.0.0.1:9 holds no variables: it started again since the chief "
              "created them",
          "an `empty` reply is the ps lost, named with its address: " + why);
  }
  check(handle(create(1)).h.what == ps::kind::create, "create");
  ps::message pulled = handle(request(ps::kind::pull));
  check(pulled.frames.size() == 2 && values(pulled, 0) == std::vector<float>{1, 2, 3, 4} &&
            values(pulled, 1) == std::vector<float>{5, 6} && pulled.h.a == 0 && pulled.h.b == 1,
        "pull: the shards as created, version 0, generation 1");

  ps::message r = handle(push(7, 1, 0));
  check(r.h.b == 1 && r.h.a == 0, "a push applied, staleness 0");
  pulled = handle(request(ps::kind::pull));
  check(values(pulled, 0) == std::vector<float>{0.5f, 1.5f, 2.5f, 3.5f} &&
            values(pulled, 1) == std::vector<float>{4, 5} && pulled.h.a == 1,
        "SGD applied on the ps: w - 0.5 g, version 1");
  r = handle(push(7, 1, 0));
  check(r.h.b == 0, "the same batch pushed again is refused");
  r = handle(push(8, 1, 0));
  check(r.h.b == 1 && r.h.a == 1, "a push computed one update behind: staleness 1");
  check(text(handle(push(9, 1, 2, 1)))
                .find("push of batch 9 from a task that did not say which: 1 "
                      "gradients for 2 shards") != std::string::npos,
        "a push with too few gradients is refused, naming the batch and the counts");

  // state, then create again (generation 2) and restore: the values and version come back; a push
  // from generation 1 is refused, neither applied nor counted as a repeat.
  const ps::message st = handle(request(ps::kind::state));
  check(st.frames.size() == 3 && st.h.a == 2, "state: a description, 2 shards, 2 iterations");
  check(handle(create(2)).h.what == ps::kind::create, "create again");
  ps::message back = request(ps::kind::restore, st.h.a);
  back.frames.push_back(zmq::message_t(st.frames[0].data(), st.frames[0].size()));
  back.frames.push_back(ps::frame_of(std::span<const float>(values(st, 1))));
  back.frames.push_back(ps::frame_of(std::span<const float>(values(st, 2))));
  check(handle(std::move(back)).h.what == ps::kind::restore, "restore");
  pulled = handle(request(ps::kind::pull));
  check(values(pulled, 1) == std::vector<float>{3, 4} && pulled.h.b == 2,
        "restored: the state's values, generation 2");
  r = handle(push(10, 1, 2));
  check(r.h.b == 2,
        "a push computed from generation 1 is refused after the variables are "
        "created again");
  check(values(handle(request(ps::kind::pull)), 1) == std::vector<float>{3, 4},
        "the refused push changed nothing");
  check(handle(push(7, 2, 0)).h.b == 1,
        "after a restore, a batch applied before is applied "
        "again (it is trained again from the backup)");
  ps::message hb = handle(request(ps::kind::heartbeat));
  check(hb.h.a == 3 && hb.h.b == 1, "heartbeat: 3 updates applied, 1 repeat refused");
  handle(request(ps::kind::shutdown));
  check(stop, "shutdown stops the server");

  refusals();
  weight_decay_on_a_ps();

  std::printf("ps_server_test: %d failed\n", failures);
  return failures == 0 ? 0 : 1;
}
