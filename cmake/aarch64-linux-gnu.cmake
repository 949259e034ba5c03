# Cross build for 64-bit ARM Linux with Debian's cross compiler (gcc-aarch64-linux-gnu, whose
# glibc is libc6-dev-arm64-cross), for the aarch64 wheel (scripts/wheel-build.sh aarch64).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# programs (pkg-config, scdoc) are the build machine's; libraries and headers the target's
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
# what runs a target program during the build or its tests: the qemu user-mode emulator
find_program(OOMLESS_QEMU_AARCH64 qemu-aarch64-static)
if(OOMLESS_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${OOMLESS_QEMU_AARCH64} -L /usr/aarch64-linux-gnu)
endif()
