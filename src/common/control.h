// The master's control channel to each worker: one SOCK_SEQPACKET socket
// pair per worker, made before its fork (the master keeps one end, the
// worker the other). A message is one byte, with a descriptor attached to
// Move:
//   master -> worker  Park      stop between two events and wait here
//                     Move + fd the segment was grown: map the copy in fd,
//                               then go on
//                     Go        go on, on the same segment
//   worker -> master  Parked    parked: touches the segment no more until told
// A worker parks only while its event loop is between two events, so no
// entry of the segment is half written by it (shm/segment.h, moveTo).
#pragma once

namespace concert::common {

enum class Control : char { Park = 'P', Move = 'M', Go = 'G', Parked = 'p' };

// Sends one message (and `fd`, when >= 0). False on failure.
bool sendControl(int socket, Control message, int fd = -1);

// Receives one message within `timeout_ms` (-1: no limit). 1: received
// (`fd` is the attached descriptor or -1); 0: the peer closed; -1: timed
// out or failed.
int receiveControl(int socket, Control* message, int* fd, int timeout_ms);

}  // namespace concert::common
