#include "worker/worker_python.h"

#include <map>

#include "gtest/gtest.h"

namespace switchyard::worker {
namespace {

::testing::AssertionResult Contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' lacks '" << part << "'";
}

// A probe over a table of pretend Pythons: what each has, or why it does not run.
PythonProbe Table(std::map<std::string, absl::StatusOr<PythonModules>> table) {
  return [table = std::move(table)](const std::string& python) -> absl::StatusOr<PythonModules> {
    auto it = table.find(python);
    if (it == table.end()) return absl::NotFoundError("not an executable");
    return it->second;
  };
}

PythonModules Everything() { return {true, true, true, true}; }

TEST(WorkerPythonCandidates, FlagAloneWhenGiven) {
  auto candidates = WorkerPythonCandidates("/opt/py", "/env/py", "/bin", "/venv/bin/python");
  ASSERT_EQ(candidates.size(), 1u);
  EXPECT_EQ(candidates[0].path, "/opt/py");
  EXPECT_EQ(candidates[0].source, "--python");
}

TEST(WorkerPythonCandidates, SearchOrderWithoutRepeats) {
  auto candidates = WorkerPythonCandidates("", "/env/py", "/bin", "/env/py");
  ASSERT_GE(candidates.size(), 2u);
  EXPECT_EQ(candidates[0].path, "/env/py");
  EXPECT_EQ(candidates[1].path, "/bin/python3");
  for (size_t i = 2; i < candidates.size(); ++i) EXPECT_NE(candidates[i].path, "/env/py");
}

TEST(ChooseWorkerPython, FirstWithJaxlibIsTakenAndNamed) {
  WorkerPython chosen = ChooseWorkerPython({{"/a", "next to the binary"},
                                            {"/b", "the venv this binary was built with"},
                                            {"/c", "python3 on PATH"}},
                                           Table({{"/b", Everything()}, {"/c", Everything()}}));
  EXPECT_EQ(chosen.path, "/b");
  EXPECT_TRUE(chosen.colocated_off.empty()) << chosen.colocated_off;
  EXPECT_TRUE(Contains(chosen.summary, "/b (the venv this binary was built with)"));
}

TEST(ChooseWorkerPython, JaxlibWithoutCloudpickleKeepsKernelsButNotColocated) {
  WorkerPython chosen = ChooseWorkerPython({{"/a", "python3 on PATH"}},
                                           Table({{"/a", PythonModules{true, true, false, true}}}));
  EXPECT_EQ(chosen.path, "/a");
  EXPECT_TRUE(Contains(chosen.colocated_off, "lacks cloudpickle"));
  EXPECT_TRUE(Contains(chosen.colocated_off, "--python="));
}

TEST(ChooseWorkerPython, NoneFoundSaysWhatWasTriedAndTheFlag) {
  WorkerPython chosen = ChooseWorkerPython(
      {{"/a", "next to the binary"}, {"/c", "python3 on PATH"}}, Table({{"/c", PythonModules{}}}));
  EXPECT_TRUE(chosen.path.empty()) << chosen.path;
  EXPECT_TRUE(Contains(chosen.summary, "/a (next to the binary: not an executable)"));
  EXPECT_TRUE(Contains(chosen.summary, "/c (python3 on PATH: has no jaxlib)"));
  EXPECT_TRUE(Contains(chosen.summary, "--python="));
  EXPECT_TRUE(Contains(chosen.colocated_off, "--python="));
}

TEST(ChooseWorkerPython, ANamedPythonThatFailsIsNotPassedOver) {
  WorkerPython chosen = ChooseWorkerPython(
      {{"/env", "$SWITCHYARD_WORKER_PYTHON"}, {"/good", "python3 on PATH"}},
      Table({{"/env", absl::UnavailableError("did not run: boom")}, {"/good", Everything()}}));
  EXPECT_TRUE(chosen.path.empty()) << chosen.path;
  EXPECT_TRUE(Contains(chosen.summary, "did not run: boom"));
}

TEST(ChooseWorkerPython, NoneTurnsBothOff) {
  WorkerPython chosen = ChooseWorkerPython({{kNoPython, "--python"}}, Table({}));
  EXPECT_TRUE(chosen.path.empty()) << chosen.path;
  EXPECT_TRUE(Contains(chosen.colocated_off, "--python=none"));
}

TEST(ProbePython, NotAnExecutable) {
  EXPECT_TRUE(absl::IsNotFound(ProbePython("/nonexistent/python3", absl::Seconds(5)).status()));
}

TEST(ProbePython, AProgramThatIsNotPythonIsReported) {
  // /bin/false runs and fails: the probe says it did not run, and returns.
  auto modules = ProbePython("/bin/false", absl::Seconds(5));
  EXPECT_TRUE(absl::IsUnavailable(modules.status())) << modules.status();
}

}  // namespace
}  // namespace switchyard::worker
