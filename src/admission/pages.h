// The built-in HTML pages, compiled in from html/ by html/embed.py.
#pragma once

#include <string_view>

namespace concert::admission {

// The built-in waiting page: a template (common/page_template.h) with every
// placeholder answers.h's renderWaitingPage fills.
extern const std::string_view kWaitingRoomHtml;
// The three 503 pages for browsers below are made from one template,
// html/notice.html, each with its own title and text (html/meson.build);
// their only placeholders are {{.Lang}} and {{.Text.NAME}}.
// The 503 page for browsers when the queue is full (the breaker).
extern const std::string_view kQueueFullHtml;
// The 503 page for browsers when a request cannot wait in line: a session
// held past -session-hold, a form that would queue, a crawler.
extern const std::string_view kBusyHtml;
// The 503 page for browsers without a session while the room rejects
// (-mode reject), unless -maintenance-html names another.
extern const std::string_view kMaintenanceHtml;

}  // namespace concert::admission
