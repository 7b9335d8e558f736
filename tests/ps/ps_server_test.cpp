// A ps task's request handling (ps/server.hpp), driven directly, without sockets: create, pull,
// push applied once per batch, requests before create answered `empty` (the ps lost), a push
// from before the variables were created again refused (its generation), staleness, state and
// restore, and the failures named.
#include <cmath>
#include <cstdio>
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
      {"optimizer", ps::to_json(tessel::optimizers::sgd{0.5, 0.0, false})},
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
  const auto f = ps::floats_of(r.frames[frame]);
  return {f.begin(), f.end()};
}
std::string text(const ps::message& r) {
  return r.h.what == ps::kind::failed ? ps::text_of(r.frames[0]) : "";
}
}  // namespace

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
  check(text(handle(push(9, 1, 2, 1))).find("push: 1 gradients for 2 shards") != std::string::npos,
        "a push with too few gradients is refused, naming the counts");

  // state, then create again (generation 2) and restore: the values and version come back; a push
  // from generation 1 is refused, neither applied nor counted as a repeat.
  const ps::message st = handle(request(ps::kind::state));
  check(st.frames.size() == 3 && st.h.a == 2, "state: a description, 2 shards, 2 iterations");
  check(handle(create(2)).h.what == ps::kind::create, "create again");
  ps::message back = request(ps::kind::restore, st.h.a);
  back.frames.push_back(zmq::message_t(st.frames[0].data(), st.frames[0].size()));
  back.frames.push_back(ps::frame_of(ps::floats_of(st.frames[1])));
  back.frames.push_back(ps::frame_of(ps::floats_of(st.frames[2])));
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
  std::printf("ps_server_test: %d failed\n", failures);
  return failures == 0 ? 0 : 1;
}
