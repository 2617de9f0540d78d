#include "routing/render_arena.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

// GCC says __SANITIZE_ADDRESS__, clang (the fuzz build) __has_feature(address_sanitizer).
#if defined(__SANITIZE_ADDRESS__)
#define ST_ARENA_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ST_ARENA_ASAN 1
#endif
#endif

#if defined(ST_ARENA_ASAN)
#include <sanitizer/asan_interface.h>
#define ST_ARENA_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define ST_ARENA_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define ST_ARENA_POISON(p, n) ((void)(p), (void)(n))
#define ST_ARENA_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace sessionturn::render {
namespace {

constexpr std::size_t kSlabBytes = 64 * 1024;  // one reply's parse fits in one, most of the time
constexpr std::size_t kAlign = alignof(std::max_align_t);
// Under AddressSanitizer every block is followed by poisoned bytes and only what was handed out is
// addressable, so cmark reading or writing past a block is still caught (the fuzz targets rely on it).
#if defined(ST_ARENA_ASAN)
constexpr std::size_t kRedzone = kAlign;
#else
constexpr std::size_t kRedzone = 0;
#endif

// In front of every block: its size, so that realloc knows what to copy. kAlign bytes, so that the
// block after it stays aligned.
struct alignas(kAlign) Header {
  std::size_t size;
};

struct Slab {
  std::unique_ptr<std::byte[]> bytes;
  std::size_t size = 0;
  std::size_t used = 0;
};

struct Arena {
  std::vector<Slab> slabs;  // the current one last
  bool open = false;
  std::size_t handed_out = 0;

  [[noreturn]] static void OutOfMemory(std::size_t n) {
    // What cmark's own allocator does when calloc fails: there is no way to fail a parse midway.
    std::fprintf(stderr, "sessionturn: cannot allocate %zu bytes for a Markdown parse\n", n);
    std::abort();
  }

  static std::size_t Rounded(std::size_t n) {
    if (n > SIZE_MAX / 2) OutOfMemory(n);
    return (n + kAlign - 1) & ~(kAlign - 1);
  }

  void* Take(std::size_t n) {
    const std::size_t need = sizeof(Header) + Rounded(n) + kRedzone;
    if (slabs.empty() || slabs.back().size - slabs.back().used < need) {
      const std::size_t size = need > kSlabBytes ? need : kSlabBytes;
      Slab slab;
      slab.bytes.reset(new (std::nothrow) std::byte[size]);
      if (!slab.bytes) OutOfMemory(size);
      slab.size = size;
      ST_ARENA_POISON(slab.bytes.get(), size);
      slabs.push_back(std::move(slab));
    }
    Slab& s = slabs.back();
    auto* h = reinterpret_cast<Header*>(s.bytes.get() + s.used);
    ST_ARENA_UNPOISON(h, sizeof(Header) + n);
    h->size = n;
    s.used += need;
    handed_out += n;
    return h + 1;
  }

  // Grows the newest block in place when there is room behind it.
  bool GrowInPlace(void* p, std::size_t n) {
    if (slabs.empty()) return false;
    Slab& s = slabs.back();
    Header* h = static_cast<Header*>(p) - 1;
    auto* end = reinterpret_cast<std::byte*>(p) + Rounded(h->size) + kRedzone;
    if (end != s.bytes.get() + s.used) return false;  // not the newest block
    const std::size_t grown = Rounded(n), had = Rounded(h->size);
    if (grown > had && grown - had > s.size - s.used) return false;
    s.used = s.used - had + grown;
    handed_out = handed_out - h->size + n;
    ST_ARENA_POISON(p, Rounded(h->size) + kRedzone);
    ST_ARENA_UNPOISON(p, n);
    h->size = n;
    return true;
  }

  ~Arena() {
    for (Slab& s : slabs) ST_ARENA_UNPOISON(s.bytes.get(), s.size);
  }

  void Reset() {
    // The first slab stays for the next parse; bigger or later ones go.
    for (Slab& s : slabs) ST_ARENA_UNPOISON(s.bytes.get(), s.size);
    if (!slabs.empty()) {
      Slab first = std::move(slabs.front());
      slabs.clear();
      if (first.size == kSlabBytes) {
        first.used = 0;
        ST_ARENA_POISON(first.bytes.get(), first.size);
        slabs.push_back(std::move(first));
      }
    }
    handed_out = 0;
  }
};

thread_local Arena t_arena;

void* ArenaCalloc(std::size_t count, std::size_t size) {
  if (size != 0 && count > SIZE_MAX / size) Arena::OutOfMemory(SIZE_MAX);
  const std::size_t n = count * size;
  void* p = t_arena.Take(n);
  std::memset(p, 0, n);
  return p;
}

void* ArenaRealloc(void* p, std::size_t n) {
  if (p == nullptr) return t_arena.Take(n);
  if (t_arena.GrowInPlace(p, n)) return p;
  const std::size_t had = (static_cast<Header*>(p) - 1)->size;
  void* q = t_arena.Take(n);
  std::memcpy(q, p, had < n ? had : n);
  return q;
}

void ArenaFree(void*) {}  // given back with the rest when the parse is done

cmark_mem g_arena_mem{ArenaCalloc, ArenaRealloc, ArenaFree};

}  // namespace

ParseArena::ParseArena() : mem_(cmark_get_default_mem_allocator()), owner_(!t_arena.open) {
  if (!owner_) return;
  t_arena.open = true;
  mem_ = &g_arena_mem;
}

ParseArena::~ParseArena() {
  if (!owner_) return;
  t_arena.Reset();
  t_arena.open = false;
}

std::size_t ParseArena::BytesUsed() noexcept {
  return t_arena.handed_out;
}

std::size_t ParseArena::BytesHeld() noexcept {
  std::size_t held = 0;
  for (const Slab& s : t_arena.slabs) held += s.size;
  return held;
}

}  // namespace sessionturn::render
