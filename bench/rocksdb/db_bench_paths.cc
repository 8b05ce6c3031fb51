// db_bench with one more flag: --db_paths, RocksDB's DBOptions::db_paths, for which
// db_bench has no flag and which an OPTIONS file cannot set (options/db_options.cc lists
// it as "not yet supported"). Everything else is db_bench's own code: this file replaces
// only tools/db_bench.cc's main() and hands db_bench_tool() a ToolHooks
// (include/rocksdb/tool_hooks.h, RocksDB's hook for custom opens) that sets the paths.
//
// Built by bench/build-rocksdb.sh against the same objects as db_bench.
//
//   db_bench_paths --db_paths=/fast/sst:671088640,/capacity/sst:0 --db=/capacity/db ...
//
// db_paths (include/rocksdb/options.h): "Newer data is placed into paths specified
// earlier in the vector while older data gradually moves to paths specified later";
// with leveled compaction a level goes to the first path whose remaining target size
// holds it (LevelCompactionBuilder::GetPathId), flushes go to the first path.

#include <gflags/gflags.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "rocksdb/db_bench_tool.h"
#include "rocksdb/tool_hooks.h"

DEFINE_string(db_paths, "",
              "Comma-separated PATH:TARGET_BYTES list for DBOptions::db_paths "
              "(SST placement by level); empty = db_bench's default (--db only)");

namespace {

using ROCKSDB_NAMESPACE::DbPath;
using ROCKSDB_NAMESPACE::Status;

// "a:1,b:2" -> {{a,1},{b,2}}; a malformed list is an error, not a silent default.
bool ParsePaths(const std::string& s, std::vector<DbPath>* out,
                std::string* err) {
  size_t start = 0;
  while (start < s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    std::string item = s.substr(start, end - start);
    size_t colon = item.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == item.size()) {
      *err = "expected PATH:TARGET_BYTES, got \"" + item + "\"";
      return false;
    }
    char* rest = nullptr;
    unsigned long long bytes =
        std::strtoull(item.c_str() + colon + 1, &rest, 10);
    if (rest == nullptr || *rest != '\0') {
      *err = "target size of \"" + item + "\" is not a number of bytes";
      return false;
    }
    out->emplace_back(item.substr(0, colon), bytes);
    start = end + 1;
  }
  return true;
}

class PathHooks : public ROCKSDB_NAMESPACE::DefaultHooks {
 public:
  using DefaultHooks::Open;

  Status Open(const ROCKSDB_NAMESPACE::Options& options,
              const std::string& name,
              std::unique_ptr<ROCKSDB_NAMESPACE::DB>* dbptr) override {
    ROCKSDB_NAMESPACE::Options o = options;
    Status s = Apply(&o);
    if (!s.ok()) return s;
    s = DefaultHooks::Open(o, name, dbptr);
    if (s.ok()) Report(dbptr->get());
    return s;
  }

  Status Open(const ROCKSDB_NAMESPACE::DBOptions& options,
              const std::string& name,
              const std::vector<ROCKSDB_NAMESPACE::ColumnFamilyDescriptor>& cfs,
              std::vector<ROCKSDB_NAMESPACE::ColumnFamilyHandle*>* handles,
              std::unique_ptr<ROCKSDB_NAMESPACE::DB>* dbptr) override {
    ROCKSDB_NAMESPACE::DBOptions o = options;
    Status s = Apply(&o);
    if (!s.ok()) return s;
    s = DefaultHooks::Open(o, name, cfs, handles, dbptr);
    if (s.ok()) Report(dbptr->get());
    return s;
  }

 private:
  static Status Apply(ROCKSDB_NAMESPACE::DBOptions* o) {
    if (FLAGS_db_paths.empty()) return Status::OK();
    std::vector<DbPath> paths;
    std::string err;
    if (!ParsePaths(FLAGS_db_paths, &paths, &err)) {
      return Status::InvalidArgument("--db_paths: " + err);
    }
    o->db_paths = paths;
    return Status::OK();
  }

  // What the open DB really uses, read back from it: the proof that the flag took effect.
  static void Report(ROCKSDB_NAMESPACE::DB* db) {
    if (FLAGS_db_paths.empty() || db == nullptr) return;
    for (const DbPath& p : db->GetDBOptions().db_paths) {
      std::fprintf(stdout, "db_paths in effect: %s target %" PRIu64 " bytes\n",
                   p.path.c_str(), p.target_size);
    }
  }
};

PathHooks hooks;

}  // namespace

int main(int argc, char** argv) {
  return ROCKSDB_NAMESPACE::db_bench_tool(argc, argv, hooks);
}
