# RocksDB reads the registration function from here (CMake too: its plugin
# loop looks for <name>_FUNC in <name>.mk). Sources, flags and libraries are in
# CMakeLists.txt; the lines below serve RocksDB's Makefile build. CMake also
# scans this file for a plain assignment of the sources and would add them a
# second time, so they are added with += only.
masse_FUNC = register_masse_fs
masse_SOURCES += fs_masse.cc
masse_CXXFLAGS += -I$(dir $(lastword $(MAKEFILE_LIST)))../../../crates/masse-ffi/include
masse_LDFLAGS += $(dir $(lastword $(MAKEFILE_LIST)))../../../target/release/libmasse_ffi.a -ldl -lm
