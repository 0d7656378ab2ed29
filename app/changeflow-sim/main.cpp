// changeflow-sim: the simulated external systems (GitLab, approval system, CI and deploy pipeline,
// permission service). Assembly only; the behaviour lives in sim/.
#include <iostream>

int main() {
  std::cerr << "changeflow-sim: not built yet\n";
  return 1;
}
