// cmark's memory for one parse (render_doc.cpp, ParseMarkdown): a bump arena of this thread's, handed
// back all at once when the parse is done. A reply's parse made some forty calloc/realloc/free calls
// of cmark's own (nodes, buffers, the parser), about a fifth of a router turn's allocator calls; from
// the arena each is a pointer bump, and its free nothing.
//
// Not cmark-gfm's own arena (cmark_get_arena_mem_allocator): that one is one arena for the process,
// unlocked, and its reset frees its 4 MB slab, which the next parse callocs (and faults in) again.
// cmark_mem has no context pointer, so the arena is per thread; a parse never starts another.
#pragma once

#include <cmark-gfm.h>

#include <cstddef>

namespace sessionturn::render {

// While alive, cmark allocations through mem() come from this thread's arena; its end gives all of
// them back (keeping the first slab for the next parse). Everything cmark allocated must be dropped
// before then (cmark_node_free, cmark_parser_free: their frees cost nothing). A scope opened while
// another is alive on the thread hands out cmark's default allocator instead.
class ParseArena {
 public:
  ParseArena();
  ~ParseArena();
  ParseArena(const ParseArena&) = delete;
  ParseArena& operator=(const ParseArena&) = delete;

  cmark_mem* mem() const noexcept { return mem_; }

  // This thread's arena: bytes handed out since the scope opened, and bytes it holds (tests).
  static std::size_t BytesUsed() noexcept;
  static std::size_t BytesHeld() noexcept;

 private:
  cmark_mem* mem_;
  bool owner_;
};

}  // namespace sessionturn::render
