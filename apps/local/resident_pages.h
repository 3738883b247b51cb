#pragma once

#include <cstdint>

namespace ql::local {

struct ReleasedPages {
  int mappings = 0;   // mappings released
  int64_t bytes = 0;  // their size (resident or not)
};

// Unmaps the resident pages of this process's read-only file mappings (the code and constants of
// the executable and its libraries) that hold no page of its own, so that only what runs after
// this call is brought back. Start-up (argument parsing, migrations, recovery, the listener's set
// up) touches far more code than an idle daemon runs; those pages stay in the page cache, where
// the kernel can reclaim them, but no longer count in the process's resident set. A page is
// read again from the page cache (a minor fault) the next time it is used. Mappings with pages
// copied on write (relocated constants) are left alone: those pages exist nowhere else.
ReleasedPages ReleaseReadOnlyFilePages();

}  // namespace ql::local
