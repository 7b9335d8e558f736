// libFuzzer harness for the paths a checkpoint is saved to (include/tessel/saving/checkpoint.hpp):
// checkpoint_detail::checkpoint_path (the path normalised, and the working directory, a parent
// directory, the root and the home directory refused), then, where the path lies in the
// harness's sandbox, a whole save's file operations as save_checkpoint runs them on process 0:
// make_staging, a shard written into the staging directory, and commit_snapshot (the old
// checkpoint replaced by the new one).
//
// Each input gets a fresh sandbox: `work` (the working directory, holding a file of the user's),
// `home` (HOME, holding a file), `user` (a directory of the user's), and at work/ckpt and
// work/ckpt.partial what the first input byte says (low 3 bits for ckpt, the next 3 for
// ckpt.partial): 0 nothing, 1 a file of the user's, 2 a checkpoint tessel wrote (a manifest of
// the "tessel-checkpoint" format and a shard), 3 a checkpoint with a file of the user's added, 4
// an empty directory, 5 a symbolic link to `user`, 6 a directory holding a directory named as a
// shard, 7 a manifest of another format. The rest of the input, up to a 0 byte, is the path, in
// which "$S" stands for the sandbox's absolute path and "$H" for the home directory's.
//
// The documented errors are tessel::value_error and tessel::runtime_error; a refused path's
// message names the path. Any other exception, a crash or a sanitizer report is a finding, and so
// is a violated invariant: an accepted path is normal (no "." or ".." inside, no trailing
// separator), is none of the refused directories, and its staging name lies beside it, not
// inside; after the save, every file of the sandbox that tessel did not write (all but those of
// a checkpoint at work/ckpt or work/ckpt.partial, layout 2) is still there with its bytes.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <tessel/core/errors.hpp>
#include <tessel/saving/checkpoint.hpp>

#include "fuzz_support.hpp"

namespace cd = tessel::checkpoint_detail;
namespace fs = std::filesystem;
using tessel_fuzz::fail;

namespace {

void write(const fs::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary) << text;
}
std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// What the first byte puts at `p`.
void make(const fs::path& p, unsigned layout, const fs::path& user) {
  const std::string manifest = R"({"format": "tessel-checkpoint", "version": 1})";
  switch (layout) {
    case 1:
      write(p, "a file of the user's");
      break;
    case 2:
    case 3:
    case 7:
      fs::create_directory(p);
      write(p / "manifest.json", layout == 7 ? R"({"format": "something else"})" : manifest);
      write(p / "shard-00000.bin", "old values");
      if (layout == 3) write(p / "mine.txt", "the user's notes");
      break;
    case 4:
      fs::create_directory(p);
      break;
    case 5:
      fs::create_directory_symlink(user, p);
      break;
    case 6:
      fs::create_directories(p / "shard-00000.bin");
      write(p / "shard-00000.bin" / "data", "the user's data");
      break;
    default:
      break;
  }
}

// Every regular file and link under `root` (links not followed), with its bytes or target.
std::map<fs::path, std::string> contents(const fs::path& root) {
  std::map<fs::path, std::string> out;
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator();
       ++it) {
    if (it->is_symlink()) out[it->path()] = "-> " + fs::read_symlink(it->path()).string();
    else if (it->is_regular_file()) out[it->path()] = read(it->path());
  }
  return out;
}

bool inside(const fs::path& p, const fs::path& dir) {
  const auto [d, _] = std::mismatch(dir.begin(), dir.end(), p.begin(), p.end());
  return d == dir.end();
}

std::string replace_all(std::string s, const std::string& what, const std::string& with) {
  for (std::size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + with.size()))
    s.replace(at, what.size(), with);
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const fs::path box = fs::canonical(tessel_fuzz::scratch().path()) / "box";
  fs::remove_all(box);
  const fs::path work = box / "work", home = box / "home", user = box / "user";
  fs::create_directories(work);
  fs::create_directories(home);
  fs::create_directories(user);
  write(work / "notes.txt", "the user's notes");
  write(home / ".profile", "the user's profile");
  write(user / "data.txt", "the user's data");
  const unsigned at_dir = data[0] & 7u, at_staging = (data[0] >> 3) & 7u;
  make(work / "ckpt", at_dir, user);
  make(work / "ckpt.partial", at_staging, user);
  const auto before = contents(box);

  std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  text = text.substr(0, text.find('\0'));
  text = replace_all(replace_all(text, "$S", box.string()), "$H", home.string());
  const fs::path given(text);

  const fs::path cwd = fs::current_path();
  fs::current_path(work);
  ::setenv("HOME", home.c_str(), 1);
  try {
    const fs::path p = cd::checkpoint_path(given);
    if (p != p.lexically_normal() || !p.has_filename() || p.filename() == "." ||
        p.filename() == "..")
      fail("an accepted checkpoint path is not normal");
    std::error_code ec;
    if (fs::equivalent(p, work, ec) || fs::equivalent(p, home, ec) || p == p.root_path())
      fail("the working, home or root directory was accepted as a checkpoint path");
    cd::snapshot s;
    s.dir = p;
    s.staging = p;
    s.staging += ".partial";
    if (s.staging.parent_path() != p.parent_path())
      fail("the staging directory is not beside the checkpoint");
    s.chief = true;
    s.devices = 0;  // no shard lists to gather: the manifest lists none
    s.variables = cd::json::array();
    // Only paths in the sandbox are saved to: the harness never writes elsewhere.
    const fs::path real = fs::weakly_canonical(fs::absolute(p), ec);
    const fs::path real_staging = fs::weakly_canonical(fs::absolute(s.staging), ec);
    if (!ec && inside(real, box) && inside(real_staging, box) && real != box &&
        real_staging != box) {
      cd::make_staging(s);
      write(s.staging / "shard-00000.bin", "new values");
      cd::commit_snapshot(s);
      if (read(s.dir / "shard-00000.bin") != "new values")
        fail("a save that returned left another shard at the checkpoint's path");
    }
  } catch (const tessel::value_error& e) {
    const std::string what = e.what();
    if (what.starts_with("save_checkpoint: the path") &&
        what.find(given.string()) == std::string::npos)
      fail("a refused checkpoint path's message does not name it");
  } catch (const tessel::runtime_error&) {
  }
  fs::current_path(cwd);

  // Nothing of the user's was removed or changed: only the files of a checkpoint tessel wrote.
  const auto after = contents(box);
  for (const auto& [path, bytes] : before) {
    const bool tessels = (at_dir == 2 && inside(path, work / "ckpt")) ||
                         (at_staging == 2 && inside(path, work / "ckpt.partial"));
    if (tessels) continue;
    const auto it = after.find(path);
    if (it == after.end()) fail("a save removed a file it did not write");
    if (it->second != bytes) fail("a save changed a file it did not write");
  }
  return 0;
}
