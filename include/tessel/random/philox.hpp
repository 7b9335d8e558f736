// philox: counter-based random numbers (Philox4x32-10, Salmon et al., SC'11). Each value is a
// pure function of (key, counter), so a tensor's random values depend only on the seed, the step
// and each element's global index: never on the device count, the sharding or the visit order.
#pragma once

#include <algorithm>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <span>
#include <string_view>

namespace tessel::random {

using philox_key = std::array<std::uint32_t, 2>;
using philox_counter = std::array<std::uint32_t, 4>;

constexpr philox_counter philox4x32(philox_counter c, philox_key k) noexcept {
  constexpr std::uint32_t m0 = 0xD2511F53u, m1 = 0xCD9E8D57u;
  constexpr std::uint32_t w0 = 0x9E3779B9u, w1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = std::uint64_t{m0} * c[0];
    const std::uint64_t p1 = std::uint64_t{m1} * c[2];
    c = {static_cast<std::uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<std::uint32_t>(p1),
         static_cast<std::uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<std::uint32_t>(p0)};
    k[0] += w0;
    k[1] += w1;
  }
  return c;
}

// 64-bit mix (splitmix64's finaliser) to turn (seed, stream) pairs into keys.
constexpr std::uint64_t mix64(std::uint64_t x) noexcept {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A stable 64-bit hash of a name (FNV-1a), so each variable path gets its own stream.
constexpr std::uint64_t hash_name(std::string_view s) noexcept {
  std::uint64_t h = 0xCBF29CE484222325ull;
  for (char ch : s) h = (h ^ static_cast<unsigned char>(ch)) * 0x100000001B3ull;
  return h;
}

// A stream of random values: key = (seed, stream), counter = (element index, step).
struct stream {
  philox_key key{};
  std::uint64_t step = 0;

  constexpr stream() = default;
  constexpr stream(std::uint64_t seed, std::uint64_t stream_id, std::uint64_t step_ = 0) noexcept
      : step(step_) {
    const std::uint64_t k = mix64(seed ^ mix64(stream_id));
    key = {static_cast<std::uint32_t>(k), static_cast<std::uint32_t>(k >> 32)};
  }

  // Four 32-bit words for the block that holds element `index` (4 elements per block).
  constexpr philox_counter block(std::uint64_t block_index) const noexcept {
    return philox4x32({static_cast<std::uint32_t>(block_index),
                       static_cast<std::uint32_t>(block_index >> 32),
                       static_cast<std::uint32_t>(step), static_cast<std::uint32_t>(step >> 32)},
                      key);
  }
  constexpr std::uint32_t bits(std::uint64_t index) const noexcept {
    return block(index / 4)[index % 4];
  }
  // The words of elements first, first + 1, ...: each whole block of four computed once (what
  // bits() gives element by element, at about a quarter of the cost).
  constexpr void fill_bits(std::uint64_t first, std::span<std::uint32_t> out) const noexcept {
    const std::size_t n = out.size();
    const std::size_t head = std::min<std::size_t>(n, (4 - first % 4) % 4);
    const std::size_t blocks = (n - head) / 4;
    for (std::size_t k = 0; k < head; ++k) out[k] = bits(first + k);
    for (std::size_t j = 0; j < blocks; ++j) {
      const philox_counter b = block((first + head) / 4 + j);
      for (std::size_t w = 0; w < 4; ++w) out[head + 4 * j + w] = b[w];
    }
    for (std::size_t k = head + 4 * blocks; k < n; ++k) out[k] = bits(first + k);
  }
  // Uniform in [0, 1), 24 bits of resolution (every value exactly representable in float).
  static constexpr float to_uniform(std::uint32_t word) noexcept {
    return static_cast<float>(word >> 8) * (1.0f / 16777216.0f);
  }
  constexpr float uniform(std::uint64_t index) const noexcept { return to_uniform(bits(index)); }
  // Standard normal by Box-Muller over two words of the element's own counter block pair.
  // `attempt` gives independent redraws for rejection sampling (truncated normals).
  float normal(std::uint64_t index, std::uint32_t attempt = 0) const noexcept {
    const philox_counter b =
        philox4x32({static_cast<std::uint32_t>(index), static_cast<std::uint32_t>(index >> 32),
                    static_cast<std::uint32_t>(step), attempt + 1},
                   {key[0] ^ 0x6A09E667u, key[1]});
    const double u1 = (static_cast<double>(b[0]) + 1.0) / 4294967297.0;  // (0, 1)
    const double u2 = static_cast<double>(b[1]) / 4294967296.0;
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) *
                              std::cos(2.0 * std::numbers::pi * u2));
  }
};

}  // namespace tessel::random
