/* Asks the kernel for transparent huge pages for mariadbd's large anonymous mappings (InnoDB's
 * buffer pool), loaded with LD_PRELOAD by scripts/db.
 *
 * Why: MariaDB asks for none, and where transparent huge pages are `madvise` (Debian's default) the
 * buffer pool then sits in 4 KB pages. On a host whose kernel samples memory (DAMON, a `kdamond`
 * thread), the status reads' p99 grew with MariaDB's resident memory while it ran, and huge pages
 * (one per 2 MB instead of 512) took most of that back (docs/performance.md, "The machine's memory
 * monitor" and "MariaDB's buffer pool in huge pages").
 * MariaDB's own `large_pages` needs huge pages reserved by root (vm.nr_hugepages); this asks for
 * transparent ones, which the `madvise` setting grants to a process that asks, and changes no
 * machine setting. Where the setting is `never` the request is a no-op.
 *
 * Only private anonymous mappings of at least 64 MiB are marked: the buffer pool and its reserved
 * address space, not the server's many small allocations. A failed madvise leaves the mapping as
 * it was. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/types.h>

enum { large_mapping = 64 << 20 };

typedef void *(*mmap_fn)(void *, size_t, int, int, int, off_t);
static mmap_fn next_mmap;

__attribute__((constructor)) static void find_next_mmap(void) { next_mmap = (mmap_fn)dlsym(RTLD_NEXT, "mmap"); }

void *mmap(void *addr, size_t length, int prot, int flags, int fd, off_t offset) {
  if (!next_mmap) find_next_mmap();  // a mapping made before the constructor ran (another preload's)
  void *p = next_mmap(addr, length, prot, flags, fd, offset);
  int anonymous_private = (flags & MAP_ANONYMOUS) && (flags & MAP_PRIVATE) && !(flags & MAP_HUGETLB);
  if (p != MAP_FAILED && anonymous_private && length >= (size_t)large_mapping) (void)madvise(p, length, MADV_HUGEPAGE);
  return p;
}

/* On 64-bit glibc, mmap64 is the same call; programs built with 64-bit file offsets call it by that name. */
void *mmap64(void *addr, size_t length, int prot, int flags, int fd, off_t offset) __attribute__((alias("mmap")));
