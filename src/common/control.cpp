// The master-worker control channel (see control.h).
#include "common/control.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace concert::common {

bool sendControl(int socket, Control message, int fd) {
  char byte = static_cast<char>(message);
  iovec iov{&byte, 1};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char space[CMSG_SPACE(sizeof(int))] = {};
  if (fd >= 0) {
    msg.msg_control = space;
    msg.msg_controllen = sizeof space;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  }
  ssize_t n;
  do {
    n = sendmsg(socket, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  return n == 1;
}

int receiveControl(int socket, Control* message, int* fd, int timeout_ms) {
  *fd = -1;
  pollfd p{socket, POLLIN, 0};
  int ready;
  do {
    ready = poll(&p, 1, timeout_ms);
  } while (ready < 0 && errno == EINTR);
  if (ready <= 0) return -1;
  char byte = 0;
  iovec iov{&byte, 1};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char space[CMSG_SPACE(sizeof(int))] = {};
  msg.msg_control = space;
  msg.msg_controllen = sizeof space;
  ssize_t n;
  do {
    n = recvmsg(socket, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n == 0) return 0;
  if (n < 0) return errno == EAGAIN ? -1 : 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) std::memcpy(fd, CMSG_DATA(c), sizeof(int));
  *message = static_cast<Control>(byte);
  return 1;
}

}  // namespace concert::common
