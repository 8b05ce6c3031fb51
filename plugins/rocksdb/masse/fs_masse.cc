// The masse FileSystem for RocksDB: every file of a database lives in a masse
// pool's file layer (vFile), reached in-process through masse's C API
// (crates/masse-ffi). Select it with a URI:
//
//   db_bench --fs_uri='masse://fast=/dev/shm/f,capacity=/var/tmp/c,create=if_missing' --db=/db ...
//
// Everything after "masse://" is a pool spec (docs/c-api.md, masse_pool_open_spec).
// Paths are absolute within the pool (--db=/db). Design notes, limits and the
// build: docs/rocksdb-plugin.md.
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "logging/env_logger.h"
#include "masse.h"
#include "rocksdb/env.h"
#include "rocksdb/file_system.h"
#include "rocksdb/io_status.h"
#include "rocksdb/utilities/object_registry.h"

namespace ROCKSDB_NAMESPACE {
namespace {

// A masse status as RocksDB's: a missing file is PathNotFound (RocksDB tells
// "no such file" that way), a full pool NoSpace, a checksum failure Corruption.
IOStatus Io(masse_status s, const std::string& what) {
  if (s == MASSE_OK) return IOStatus::OK();
  std::string msg = what + ": " + masse_last_error();
  switch (s) {
    case MASSE_NOT_FOUND:
      return IOStatus::PathNotFound(msg);
    case MASSE_NO_SPACE:
      return IOStatus::NoSpace(msg);
    case MASSE_CORRUPT:
      return IOStatus::Corruption(msg);
    case MASSE_INVALID:
      return IOStatus::InvalidArgument(msg);
    default:
      return IOStatus::IOError(msg);
  }
}

// RocksDB paths are absolute; a relative one means the same from the pool root.
std::string Abs(const std::string& p) { return p.empty() || p[0] != '/' ? "/" + p : p; }

// One open pool, shared by every MasseFileSystem naming the same spec (a pool
// opens in one process once; a second open of its devices is refused).
class Pool {
 public:
  explicit Pool(masse_pool* p) : p_(p) {}
  ~Pool() {
    masse_status s = masse_pool_close(p_);
    if (s != MASSE_OK) {
      fprintf(stderr, "masse: closing the pool failed: %s\n", masse_last_error());
    }
  }
  masse_pool* get() const { return p_; }

  static IOStatus Open(const std::string& spec, std::shared_ptr<Pool>* out) {
    static std::mutex mu;
    static std::map<std::string, std::weak_ptr<Pool>> open;
    std::lock_guard<std::mutex> g(mu);
    if (auto p = open[spec].lock()) {
      *out = p;
      return IOStatus::OK();
    }
    masse_pool* p = nullptr;
    IOStatus s = Io(masse_pool_open_spec(spec.c_str(), &p), "opening masse pool " + spec);
    if (!s.ok()) return s;
    *out = std::make_shared<Pool>(p);
    open[spec] = *out;
    return IOStatus::OK();
  }

 private:
  masse_pool* p_;
};

// An open masse file; closed with the object.
class File {
 public:
  File(std::shared_ptr<Pool> pool, masse_file* f) : pool_(std::move(pool)), f_(f) {}
  ~File() { Close(); }
  masse_file* get() const { return f_; }
  IOStatus Close() {
    if (f_ == nullptr) return IOStatus::OK();
    masse_status s = masse_file_close(f_);
    f_ = nullptr;
    return Io(s, "close");
  }
  static IOStatus Open(const std::shared_ptr<Pool>& pool, const std::string& path, uint32_t flags,
                       std::unique_ptr<File>* out) {
    masse_file* f = nullptr;
    IOStatus s = Io(masse_file_open(pool->get(), path.c_str(), flags, 0644, &f), path);
    if (s.ok()) out->reset(new File(pool, f));
    return s;
  }
  IOStatus Size(uint64_t* size) const {
    masse_attr st;
    IOStatus s = Io(masse_file_stat(f_, &st), "stat");
    if (s.ok()) *size = st.size;
    return s;
  }

 private:
  std::shared_ptr<Pool> pool_;  // keeps the pool open while the file is
  masse_file* f_;
};

class MasseSequentialFile : public FSSequentialFile {
 public:
  explicit MasseSequentialFile(std::unique_ptr<File> f) : f_(std::move(f)) {}
  IOStatus Read(size_t n, const IOOptions&, Slice* result, char* scratch,
                IODebugContext*) override {
    size_t got = 0;
    IOStatus s = Io(masse_file_pread(f_->get(), reinterpret_cast<uint8_t*>(scratch), n, pos_, &got),
                    "read");
    *result = Slice(scratch, s.ok() ? got : 0);
    if (s.ok()) pos_ += got;
    return s;
  }
  IOStatus PositionedRead(uint64_t offset, size_t n, const IOOptions&, Slice* result,
                          char* scratch, IODebugContext*) override {
    size_t got = 0;
    IOStatus s = Io(
        masse_file_pread(f_->get(), reinterpret_cast<uint8_t*>(scratch), n, offset, &got), "read");
    *result = Slice(scratch, s.ok() ? got : 0);
    return s;
  }
  IOStatus Skip(uint64_t n) override {
    uint64_t size = 0;
    IOStatus s = f_->Size(&size);
    if (s.ok()) pos_ = std::min(pos_ + n, size);
    return s;
  }

 private:
  std::unique_ptr<File> f_;
  uint64_t pos_ = 0;
};

class MasseRandomAccessFile : public FSRandomAccessFile {
 public:
  MasseRandomAccessFile(std::unique_ptr<File> f, bool direct)
      : f_(std::move(f)), direct_(direct) {}
  IOStatus Read(uint64_t offset, size_t n, const IOOptions&, Slice* result, char* scratch,
                IODebugContext*) const override {
    size_t got = 0;
    IOStatus s = Io(
        masse_file_pread(f_->get(), reinterpret_cast<uint8_t*>(scratch), n, offset, &got), "read");
    *result = Slice(scratch, s.ok() ? got : 0);
    return s;
  }
  // The blocks of one batch (MultiGet, async prefetch) in one masse call:
  // their engine reads go to the devices together.
  IOStatus MultiRead(FSReadRequest* reqs, size_t num_reqs, const IOOptions&,
                     IODebugContext*) override {
    std::vector<masse_read_req> r(num_reqs);
    for (size_t i = 0; i < num_reqs; i++) {
      r[i].offset = reqs[i].offset;
      r[i].len = reqs[i].len;
      r[i].buf = reinterpret_cast<uint8_t*>(reqs[i].scratch);
    }
    // All or nothing: a failed call failed every request.
    IOStatus all = Io(masse_file_read_many(f_->get(), r.data(), num_reqs), "multiread");
    for (size_t i = 0; i < num_reqs; i++) {
      reqs[i].status = all;
      reqs[i].result = Slice(reqs[i].scratch, all.ok() ? r[i].result : 0);
    }
    return IOStatus::OK();
  }
  IOStatus Prefetch(uint64_t, size_t, const IOOptions&, IODebugContext*) override {
    return IOStatus::OK();  // no page cache to warm
  }
  IOStatus GetFileSize(uint64_t* size) override { return f_->Size(size); }
  // With use_direct_reads the file says it is direct (there is no page cache
  // under it either way) and asks for no alignment, so RocksDB reads exactly
  // the block it wants and masse reads only that range of its chunk.
  bool use_direct_io() const override { return direct_; }
  size_t GetRequiredBufferAlignment() const override { return 1; }

 private:
  std::unique_ptr<File> f_;
  bool direct_;
};

class MasseWritableFile : public FSWritableFile {
 public:
  MasseWritableFile(std::unique_ptr<File> f, uint64_t size, const FileOptions& o)
      : FSWritableFile(o), f_(std::move(f)), size_(size) {}
  ~MasseWritableFile() override { f_->Close(); }
  IOStatus Append(const Slice& data, const IOOptions&, IODebugContext*) override {
    IOStatus s = Io(masse_file_pwrite(f_->get(), reinterpret_cast<const uint8_t*>(data.data()),
                                      data.size(), size_),
                    "append");
    if (s.ok()) size_ += data.size();
    return s;
  }
  IOStatus Append(const Slice& data, const IOOptions& o, const DataVerificationInfo&,
                  IODebugContext* dbg) override {
    return Append(data, o, dbg);
  }
  IOStatus PositionedAppend(const Slice& data, uint64_t offset, const IOOptions&,
                            IODebugContext*) override {
    IOStatus s = Io(masse_file_pwrite(f_->get(), reinterpret_cast<const uint8_t*>(data.data()),
                                      data.size(), offset),
                    "positioned append");
    if (s.ok()) size_ = std::max(size_, offset + data.size());
    return s;
  }
  IOStatus PositionedAppend(const Slice& data, uint64_t offset, const IOOptions& o,
                            const DataVerificationInfo&, IODebugContext* dbg) override {
    return PositionedAppend(data, offset, o, dbg);
  }
  IOStatus Truncate(uint64_t size, const IOOptions&, IODebugContext*) override {
    IOStatus s = Io(masse_file_truncate(f_->get(), size), "truncate");
    if (s.ok()) size_ = size;
    return s;
  }
  IOStatus Close(const IOOptions&, IODebugContext*) override { return f_->Close(); }
  // Appends are already in masse's write-back buffer, as written data is in a
  // page cache: Flush has nothing to do, Sync makes it durable.
  IOStatus Flush(const IOOptions&, IODebugContext*) override { return IOStatus::OK(); }
  IOStatus Sync(const IOOptions&, IODebugContext*) override {
    return Io(masse_file_datasync(f_->get()), "sync");
  }
  IOStatus Fsync(const IOOptions&, IODebugContext*) override {
    return Io(masse_file_sync(f_->get()), "fsync");
  }
  bool IsSyncThreadSafe() const override { return true; }
  uint64_t GetFileSize(const IOOptions&, IODebugContext*) override { return size_; }
  IOStatus RangeSync(uint64_t, uint64_t, const IOOptions&, IODebugContext*) override {
    return IOStatus::OK();  // a hint to start write-back early; masse's own thread does
  }
  IOStatus Allocate(uint64_t, uint64_t, const IOOptions&, IODebugContext*) override {
    return IOStatus::OK();
  }

 private:
  std::unique_ptr<File> f_;
  uint64_t size_;
};

// Namespace changes in masse are durable when they return: a directory fsync
// has nothing left to do.
class MasseDirectory : public FSDirectory {
 public:
  IOStatus Fsync(const IOOptions&, IODebugContext*) override { return IOStatus::OK(); }
  IOStatus Close(const IOOptions&, IODebugContext*) override { return IOStatus::OK(); }
};

class MasseLock : public FileLock {
 public:
  explicit MasseLock(masse_file_lock* l) : l_(l) {}
  masse_file_lock* l_;
};

class MasseFileSystem : public FileSystem {
 public:
  explicit MasseFileSystem(std::shared_ptr<Pool> pool) : pool_(std::move(pool)) {}
  static const char* kClassName() { return "MasseFileSystem"; }
  const char* Name() const override { return kClassName(); }

  IOStatus NewSequentialFile(const std::string& fname, const FileOptions&,
                             std::unique_ptr<FSSequentialFile>* result,
                             IODebugContext*) override {
    std::unique_ptr<File> f;
    IOStatus s = File::Open(pool_, Abs(fname), 0, &f);
    if (s.ok()) result->reset(new MasseSequentialFile(std::move(f)));
    return s;
  }
  IOStatus NewRandomAccessFile(const std::string& fname, const FileOptions& o,
                               std::unique_ptr<FSRandomAccessFile>* result,
                               IODebugContext*) override {
    std::unique_ptr<File> f;
    IOStatus s = File::Open(pool_, Abs(fname), 0, &f);
    if (s.ok()) result->reset(new MasseRandomAccessFile(std::move(f), o.use_direct_reads));
    return s;
  }
  IOStatus NewWritableFile(const std::string& fname, const FileOptions& o,
                           std::unique_ptr<FSWritableFile>* result, IODebugContext*) override {
    std::unique_ptr<File> f;
    IOStatus s = File::Open(pool_, Abs(fname), MASSE_O_CREATE | MASSE_O_TRUNC, &f);
    if (s.ok()) result->reset(new MasseWritableFile(std::move(f), 0, o));
    return s;
  }
  IOStatus ReopenWritableFile(const std::string& fname, const FileOptions& o,
                              std::unique_ptr<FSWritableFile>* result,
                              IODebugContext*) override {
    std::unique_ptr<File> f;
    IOStatus s = File::Open(pool_, Abs(fname), MASSE_O_CREATE, &f);
    uint64_t size = 0;
    if (s.ok()) s = f->Size(&size);
    if (s.ok()) result->reset(new MasseWritableFile(std::move(f), size, o));
    return s;
  }
  IOStatus ReuseWritableFile(const std::string& fname, const std::string& old_fname,
                             const FileOptions& o, std::unique_ptr<FSWritableFile>* result,
                             IODebugContext* dbg) override {
    IOStatus s = RenameFile(old_fname, fname, IOOptions(), dbg);
    if (!s.ok()) return s;
    return NewWritableFile(fname, o, result, dbg);
  }
  IOStatus NewDirectory(const std::string& name, const IOOptions& o,
                        std::unique_ptr<FSDirectory>* result, IODebugContext* dbg) override {
    bool dir = false;
    IOStatus s = IsDirectory(name, o, &dir, dbg);
    if (s.ok() && !dir) s = IOStatus::IOError(name + " is not a directory");
    if (s.ok()) result->reset(new MasseDirectory());
    return s;
  }
  IOStatus FileExists(const std::string& fname, const IOOptions&, IODebugContext*) override {
    masse_attr st;
    masse_status r = masse_stat(pool_->get(), Abs(fname).c_str(), &st);
    return r == MASSE_NOT_FOUND ? IOStatus::NotFound() : Io(r, fname);
  }
  IOStatus GetChildren(const std::string& dir, const IOOptions&, std::vector<std::string>* result,
                       IODebugContext*) override {
    masse_dirent* e = nullptr;
    size_t n = 0;
    IOStatus s = Io(masse_list(pool_->get(), Abs(dir).c_str(), &e, &n), dir);
    if (!s.ok()) return s;
    result->clear();
    for (size_t i = 0; i < n; i++) result->emplace_back(e[i].name);
    masse_list_free(e, n);
    return s;
  }
  IOStatus DeleteFile(const std::string& fname, const IOOptions&, IODebugContext*) override {
    return Io(masse_unlink(pool_->get(), Abs(fname).c_str()), "delete " + fname);
  }
  IOStatus Truncate(const std::string& fname, size_t size, const IOOptions&,
                    IODebugContext*) override {
    std::unique_ptr<File> f;
    IOStatus s = File::Open(pool_, Abs(fname), 0, &f);
    if (s.ok()) s = Io(masse_file_truncate(f->get(), size), "truncate " + fname);
    return s;
  }
  IOStatus CreateDir(const std::string& dirname, const IOOptions&, IODebugContext*) override {
    return Io(masse_mkdir(pool_->get(), Abs(dirname).c_str(), 0755), "mkdir " + dirname);
  }
  IOStatus CreateDirIfMissing(const std::string& dirname, const IOOptions& o,
                              IODebugContext* dbg) override {
    masse_status r = masse_mkdir(pool_->get(), Abs(dirname).c_str(), 0755);
    if (r != MASSE_EXISTS) return Io(r, "mkdir " + dirname);
    bool dir = false;
    IOStatus s = IsDirectory(dirname, o, &dir, dbg);
    if (s.ok() && !dir) s = IOStatus::IOError(dirname + " exists and is not a directory");
    return s;
  }
  IOStatus DeleteDir(const std::string& dirname, const IOOptions&, IODebugContext*) override {
    return Io(masse_rmdir(pool_->get(), Abs(dirname).c_str()), "rmdir " + dirname);
  }
  IOStatus GetFileSize(const std::string& fname, const IOOptions&, uint64_t* size,
                       IODebugContext*) override {
    masse_attr st;
    IOStatus s = Io(masse_stat(pool_->get(), Abs(fname).c_str(), &st), fname);
    if (s.ok()) *size = st.size;
    return s;
  }
  IOStatus GetFileModificationTime(const std::string& fname, const IOOptions&, uint64_t* mtime,
                                   IODebugContext*) override {
    masse_attr st;
    IOStatus s = Io(masse_stat(pool_->get(), Abs(fname).c_str(), &st), fname);
    if (s.ok()) *mtime = static_cast<uint64_t>(st.mtime_sec);
    return s;
  }
  IOStatus RenameFile(const std::string& src, const std::string& target, const IOOptions&,
                      IODebugContext*) override {
    return Io(masse_rename(pool_->get(), Abs(src).c_str(), Abs(target).c_str()),
              "rename " + src + " to " + target);
  }
  IOStatus LinkFile(const std::string& src, const std::string& target, const IOOptions&,
                    IODebugContext*) override {
    return Io(masse_link(pool_->get(), Abs(src).c_str(), Abs(target).c_str()),
              "link " + src + " to " + target);
  }
  IOStatus NumFileLinks(const std::string& fname, const IOOptions&, uint64_t* count,
                        IODebugContext*) override {
    masse_attr st;
    IOStatus s = Io(masse_stat(pool_->get(), Abs(fname).c_str(), &st), fname);
    if (s.ok()) *count = st.nlink;
    return s;
  }
  IOStatus AreFilesSame(const std::string& a, const std::string& b, const IOOptions&, bool* res,
                        IODebugContext*) override {
    masse_attr sa, sb;
    IOStatus s = Io(masse_stat(pool_->get(), Abs(a).c_str(), &sa), a);
    if (s.ok()) s = Io(masse_stat(pool_->get(), Abs(b).c_str(), &sb), b);
    if (s.ok()) *res = sa.ino == sb.ino;
    return s;
  }
  IOStatus LockFile(const std::string& fname, const IOOptions&, FileLock** lock,
                    IODebugContext*) override {
    masse_file_lock* l = nullptr;
    IOStatus s = Io(masse_lock(pool_->get(), Abs(fname).c_str(), &l), "lock " + fname);
    *lock = s.ok() ? new MasseLock(l) : nullptr;
    return s;
  }
  IOStatus UnlockFile(FileLock* lock, const IOOptions&, IODebugContext*) override {
    auto* l = static_cast<MasseLock*>(lock);
    IOStatus s = Io(masse_unlock(l->l_), "unlock");
    delete l;
    return s;
  }
  IOStatus GetTestDirectory(const IOOptions& o, std::string* path, IODebugContext* dbg) override {
    *path = "/rocksdbtest";
    return CreateDirIfMissing(*path, o, dbg);
  }
  // RocksDB's info LOG, written through a masse file.
  IOStatus NewLogger(const std::string& fname, const IOOptions& o,
                     std::shared_ptr<Logger>* result, IODebugContext* dbg) override {
    std::unique_ptr<FSWritableFile> f;
    IOStatus s = NewWritableFile(fname, FileOptions(), &f, dbg);
    (void)o;
    if (s.ok()) result->reset(new EnvLogger(std::move(f), fname, EnvOptions(), Env::Default()));
    return s;
  }
  IOStatus GetAbsolutePath(const std::string& db_path, const IOOptions&, std::string* out,
                           IODebugContext*) override {
    *out = Abs(db_path);
    return IOStatus::OK();
  }
  IOStatus IsDirectory(const std::string& path, const IOOptions&, bool* is_dir,
                       IODebugContext*) override {
    masse_attr st;
    IOStatus s = Io(masse_stat(pool_->get(), Abs(path).c_str(), &st), path);
    if (s.ok()) *is_dir = st.kind == MASSE_KIND_DIR;
    return s;
  }

 private:
  std::shared_ptr<Pool> pool_;
};

}  // namespace

// Registers "masse://SPEC" (ROCKSDB_PLUGINS: masse_FUNC in masse.mk).
extern "C" int register_masse_fs(ObjectLibrary& library, const std::string&) {
  library.AddFactory<FileSystem>(
      ObjectLibrary::PatternEntry("masse", false).AddSeparator("://", false),
      [](const std::string& uri, std::unique_ptr<FileSystem>* guard, std::string* errmsg) {
        const std::string prefix = "masse://";
        std::string spec = uri.compare(0, prefix.size(), prefix) == 0 ? uri.substr(prefix.size()) : uri;
        std::shared_ptr<Pool> pool;
        IOStatus s = Pool::Open(spec, &pool);
        if (!s.ok()) {
          *errmsg = s.ToString();
          return static_cast<FileSystem*>(nullptr);
        }
        guard->reset(new MasseFileSystem(pool));
        return guard->get();
      });
  return 1;
}

}  // namespace ROCKSDB_NAMESPACE
