# Sourced by scripts/build.sh and fuzz/run.sh: the CMake arguments that put
# ccache in front of the compilers, when ccache is installed. Its cache lives
# outside the clone (/var/cache/cellgate/ccache, like the kernel image), so a
# fresh clone of an unchanged tree compiles from it. Paths under the clone
# are hashed relative to it, so clones in different places share entries.
# CELLGATE_CCACHE=0 turns it off.
#
#   source scripts/compiler-cache.sh "$repo_root"; cmake … "${compiler_cache_args[@]}"
compiler_cache_args=()
if [[ ${CELLGATE_CCACHE:-1} != 0 ]] && command -v ccache >/dev/null; then
  export CCACHE_DIR=${CCACHE_DIR:-/var/cache/cellgate/ccache}
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$1}
  export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-true}
  export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-6G}
  # The rooms' precompiled header comes in by -include: ccache caches such
  # units only when told not to hash the PCH's defines and time macros.
  export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}
  if mkdir -p "$CCACHE_DIR" 2>/dev/null && [[ -w $CCACHE_DIR ]]; then
    compiler_cache_args=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  fi
fi
