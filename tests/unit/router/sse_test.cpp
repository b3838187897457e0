// SseReader: events split anywhere across reads, comments, CRLF endings,
// several data lines.
#include <gtest/gtest.h>

#include "router/sse.h"

namespace kvlm::router {
namespace {

TEST(SseReader, EventsArriveWhateverTheReadsSplit) {
  const std::string stream = "data: {\"a\":1}\n\n: keep-alive\n\ndata: x\ndata: y\n\nevent: e\ndata: [DONE]\n\n";
  for (size_t step = 1; step <= stream.size(); ++step) {
    SseReader r;
    std::vector<SseEvent> got;
    for (size_t i = 0; i < stream.size(); i += step)
      for (SseEvent& e : r.feed(std::string_view(stream).substr(i, step))) got.push_back(std::move(e));
    ASSERT_EQ(got.size(), 4u) << "step " << step;
    EXPECT_EQ(got[0].data, "{\"a\":1}");
    EXPECT_TRUE(got[1].comment);
    EXPECT_EQ(got[2].data, "x\ny");
    EXPECT_EQ(got[3].data, "[DONE]");
    EXPECT_EQ(r.num_pending(), 0u);
  }
}

TEST(SseReader, CrlfAndAnUnfinishedTail) {
  SseReader r;
  auto got = r.feed("data:a\r\n\r\ndata: b");
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].data, "a");
  EXPECT_GT(r.num_pending(), 0u);
  got = r.feed("\n\n");
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].data, "b");
}

}  // namespace
}  // namespace kvlm::router
