#include "tests/support/http_client.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <algorithm>

namespace changeflow::testing {

namespace beast = boost::beast;
namespace bhttp = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

http_result http_call(const std::string& host, unsigned short port, const std::string& method,
                      const std::string& target, const std::string& body,
                      const std::vector<std::pair<std::string, std::string>>& headers,
                      std::chrono::milliseconds timeout) {
  http_result out;
  try {
    net::io_context ioc;
    beast::tcp_stream stream(ioc);
    tcp::resolver resolver(ioc);
    auto endpoints = resolver.resolve(host, std::to_string(port));
    bhttp::request<bhttp::string_body> req{bhttp::string_to_verb(method), target, 11};
    req.set(bhttp::field::host, host);
    bool has_type = false;
    for (auto& [k, v] : headers) {
      req.insert(k, v);
      std::string lk = k;
      std::transform(lk.begin(), lk.end(), lk.begin(), ::tolower);
      if (lk == "content-type") has_type = true;
    }
    if (!body.empty() && !has_type) req.set(bhttp::field::content_type, "application/json");
    req.body() = body;
    req.prepare_payload();
    req.keep_alive(false);

    beast::flat_buffer buffer;
    bhttp::response_parser<bhttp::string_body> parser;
    parser.body_limit(64 * 1024 * 1024);
    beast::error_code result_ec;
    stream.expires_after(timeout);
    stream.async_connect(endpoints, [&](beast::error_code ec, const tcp::endpoint&) {
      if (ec) {
        result_ec = ec;
        return;
      }
      bhttp::async_write(stream, req, [&](beast::error_code ec2, std::size_t) {
        if (ec2) {
          result_ec = ec2;
          return;
        }
        bhttp::async_read(stream, buffer, parser, [&](beast::error_code ec3, std::size_t) { result_ec = ec3; });
      });
    });
    ioc.run();
    if (result_ec) {
      out.error = result_ec.message();
      return out;
    }
    auto& res = parser.get();
    out.status = static_cast<int>(res.result_int());
    out.body = res.body();
    for (const auto& f : res) {
      std::string name(f.name_string());
      std::transform(name.begin(), name.end(), name.begin(), ::tolower);
      out.headers[name] = std::string(f.value());
    }
  } catch (const std::exception& e) {
    out.error = e.what();
  }
  return out;
}

std::string raw_exchange(const std::string& host, unsigned short port, const std::string& bytes,
                         std::chrono::milliseconds timeout) {
  std::string received;
  try {
    net::io_context ioc;
    beast::tcp_stream stream(ioc);
    tcp::resolver resolver(ioc);
    auto endpoints = resolver.resolve(host, std::to_string(port));
    std::array<char, 4096> chunk{};
    std::function<void()> read_more;
    read_more = [&] {
      stream.async_read_some(net::buffer(chunk), [&](beast::error_code ec, std::size_t n) {
        received.append(chunk.data(), n);
        if (!ec) read_more();
      });
    };
    stream.expires_after(timeout);
    stream.async_connect(endpoints, [&](beast::error_code ec, const tcp::endpoint&) {
      if (ec) return;
      net::async_write(stream, net::buffer(bytes), [&](beast::error_code ec2, std::size_t) {
        if (!ec2) read_more();
      });
    });
    ioc.run();
  } catch (const std::exception&) {
  }
  return received;
}

}  // namespace changeflow::testing
