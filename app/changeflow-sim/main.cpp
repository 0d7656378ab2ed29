// changeflow-sim: the simulated external systems (GitLab, approval system, CI and deploy pipeline,
// permission service). Assembly only; the behaviour lives in sim/. See docs/external-contracts.md.
#include "base/log.hpp"
#include "sim/simulator.hpp"

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>

namespace {

void usage() {
  std::cerr << "usage: changeflow-sim [--port N] [--port-file F] [--seed S] [--approval-secret X]\n"
               "         [--deploy-secret Y] [--deploy-callback-url URL] [--callback-delay-ms D]\n"
               "         [--callback-attempts N]  deliveries per callback (backoff 100 ms doubling, capped at 2 s)\n"
               "         [--callback-copies N --callback-copy-gap-ms G]  every callback N times, same id, G ms apart\n"
               "         [--callback-copy-base-url http://host:port]  copies after the first go to this base\n"
               "           (the same path), as a load balancer spreads one sender's redeliveries\n"
               "         [--callback-lanes L]  threads sending callbacks (0: the scheduler thread)\n"
               "         [--pipeline-duration-ms P] [--rebase-duration-ms R] [--threads T]\n"
               "         [--pipeline-running-reads K]  a new pipeline reads \"running\" K times before its outcome\n"
               "         [--first-mr-iid N]  every project's first MR number (default 1)\n"
               "         [--tokens author-token=1,approver-1-token=101,approver-2-token=102]\n"
               "         [--projects config/changes=main;team/payments=main,release]  the GitLab projects and\n"
               "           their branches (default: any project path, with a main branch)\n"
               "         [--webhook-url URL --webhook-secrets config/changes=secret;team/payments=secret2]\n"
               "           GitLab's Pipeline, Merge Request and Deployment Hooks for the listed projects\n";
}

bool parse_args(int argc, char** argv, changeflow::sim::sim_options& o, std::string& port_file) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") return false;
    if (i + 1 >= argc) {
      std::cerr << "missing value for " << arg << "\n";
      return false;
    }
    std::string value = argv[++i];
    try {
      if (arg == "--port")
        o.port = static_cast<std::uint16_t>(std::stoul(value));
      else if (arg == "--port-file")
        port_file = value;
      else if (arg == "--seed")
        o.seed = std::stoull(value);
      else if (arg == "--approval-secret")
        o.approval_secret = value;
      else if (arg == "--deploy-secret")
        o.deploy_secret = value;
      else if (arg == "--deploy-callback-url")
        o.deploy_callback_url = value;
      else if (arg == "--callback-delay-ms")
        o.callback_delay = std::chrono::milliseconds(std::stoll(value));
      else if (arg == "--callback-attempts")
        o.callback_attempts = std::max(1, std::stoi(value));
      else if (arg == "--callback-copies")
        o.callback_copies = std::max(1, std::stoi(value));
      else if (arg == "--callback-copy-gap-ms")
        o.callback_copy_gap = std::chrono::milliseconds(std::stoll(value));
      else if (arg == "--callback-copy-base-url")
        o.callback_copy_base = value;
      else if (arg == "--callback-lanes")
        o.callback_lanes = std::max(0, std::stoi(value));
      else if (arg == "--first-mr-iid")
        o.first_mr_iid = std::max<std::int64_t>(1, std::stoll(value));
      else if (arg == "--pipeline-running-reads")
        o.pipeline_running_reads = std::max(0, std::stoi(value));
      else if (arg == "--pipeline-duration-ms")
        o.pipeline_duration = std::chrono::milliseconds(std::stoll(value));
      else if (arg == "--rebase-duration-ms")
        o.rebase_duration = std::chrono::milliseconds(std::stoll(value));
      else if (arg == "--threads")
        o.threads = std::stoi(value);
      else if (arg == "--tokens") {
        o.tokens = changeflow::sim::parse_token_map(value);
        if (o.tokens.empty()) {
          std::cerr << "--tokens: expected token=userid[,token=userid...]\n";
          return false;
        }
      } else if (arg == "--webhook-url") {
        o.webhook_url = value;
      } else if (arg == "--webhook-secrets") {
        o.webhook_secrets = changeflow::sim::parse_secret_map(value);
        if (o.webhook_secrets.empty()) {
          std::cerr << "--webhook-secrets: expected path=secret[;path=secret...]\n";
          return false;
        }
      } else if (arg == "--projects") {
        o.projects = changeflow::sim::parse_project_map(value);
        if (o.projects.empty()) {
          std::cerr << "--projects: expected path=branch[,branch...][;path=branch...]\n";
          return false;
        }
      } else {
        std::cerr << "unknown option " << arg << "\n";
        return false;
      }
    } catch (const std::exception&) {
      std::cerr << "bad value for " << arg << "\n";
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  changeflow::sim::sim_options options;
  std::string port_file;
  if (!parse_args(argc, argv, options, port_file)) {
    usage();
    return 2;
  }
  changeflow::log::set_component("changeflow-sim");

  // Block the stop signals before any thread starts, then wait for them here.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  changeflow::sim::simulator sim(options);
  try {
    sim.start();
  } catch (const std::exception& e) {
    changeflow::log::error("sim.start_failed", {{"what", e.what()}});
    return 1;
  }
  if (!port_file.empty()) {
    // Written to a temporary name and renamed, so a reader never sees a half-written port.
    std::string tmp = port_file + ".tmp";
    {
      std::ofstream out(tmp);
      out << sim.port() << "\n";
    }
    std::rename(tmp.c_str(), port_file.c_str());
  }
  changeflow::log::info("sim.started", {{"port", sim.port()}, {"seed", options.seed}});

  int sig = 0;
  sigwait(&stop_signals, &sig);
  changeflow::log::info("sim.stopping", {{"signal", sig}});
  sim.stop();
  return 0;
}
