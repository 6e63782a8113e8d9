// The wire side of a local event stream; see event_stream_writer.h.
#include "worker/event_stream_writer.h"

#include <utility>

namespace concert::worker {

EventStreamWriter::Opened EventStreamWriter::open(std::unique_ptr<admission::EventFeed> feed,
                                                  const http::Request& request, bool may_keep_alive, Millis now) {
  feed_ = std::move(feed);
  admission::EventFeed::Opening opening = feed_->open(request, now);
  Opened opened;
  opened.response = std::move(opening.response);
  if (!opening.stream) {
    feed_.reset();
    return opened;
  }
  opened.stream = true;
  // A request body is never read here: the connection closes after the
  // stream rather than parse it as the next request.
  chunked_ = request.http_minor >= 1;
  keep_alive_ = chunked_ && request.keep_alive && may_keep_alive;
  std::string head;
  http::serializeStreamHead(opened.response, chunked_, !keep_alive_, head);
  client_.write(head);
  write(opening.first.text(), now);
  opened.ended = opening.first.ends();
  return opened;
}

EventStreamWriter::Next EventStreamWriter::recheck(Millis now, bool tick, bool may_send_position, bool& position) {
  admission::EventFeed::Event event = feed_->recheck(now, may_send_position);
  position = event.kind == admission::EventFeed::Event::Kind::Position;
  if (event.kind != admission::EventFeed::Event::Kind::None)
    write(event.text(), now);
  else if (tick && now - written_ms_ >= kKeepAliveEvery)
    write(admission::kEventStreamKeepAlive, now);
  if (event.ends()) return Next::End;
  if (client_.pendingOutput() > kMaxStreamBacklog) return Next::Backlogged;
  return Next::Open;
}

bool EventStreamWriter::finish() {
  feed_.reset();
  if (chunked_) client_.write("0\r\n\r\n", 5);
  return keep_alive_;
}

void EventStreamWriter::write(std::string_view text, Millis now) {
  if (chunked_)
    client_.writeChunk(text);
  else
    client_.write(text);
  sent_ += text.size();
  written_ms_ = now;
}

}  // namespace concert::worker
