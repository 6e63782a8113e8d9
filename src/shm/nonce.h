// Unguessable 64-bit nonces for ticket cookies, from the kernel's CSPRNG
// (getrandom), buffered so one system call serves many tickets. shm must
// not depend on OpenSSL. The buffer is per process and emptied in a forked
// child (pthread_atfork), so two workers forked from one master never hand
// out the same bytes. Nothing here is in shared memory: a SIGKILL loses
// only the dead process's unused buffered bytes, which nobody saw.
#pragma once

#include <cstdint>

namespace concert::shm {

uint64_t randomNonce();

}  // namespace concert::shm
