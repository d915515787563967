#include "worker/worker_python.h"

#include <map>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace switchyard::worker {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

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
  EXPECT_THAT(chosen.colocated_off, IsEmpty());
  EXPECT_THAT(chosen.summary, HasSubstr("/b (the venv this binary was built with)"));
}

TEST(ChooseWorkerPython, JaxlibWithoutCloudpickleKeepsKernelsButNotColocated) {
  WorkerPython chosen = ChooseWorkerPython({{"/a", "python3 on PATH"}},
                                           Table({{"/a", PythonModules{true, true, false, true}}}));
  EXPECT_EQ(chosen.path, "/a");
  EXPECT_THAT(chosen.colocated_off, HasSubstr("lacks cloudpickle"));
  EXPECT_THAT(chosen.colocated_off, HasSubstr("--python="));
}

TEST(ChooseWorkerPython, NoneFoundSaysWhatWasTriedAndTheFlag) {
  WorkerPython chosen = ChooseWorkerPython(
      {{"/a", "next to the binary"}, {"/c", "python3 on PATH"}}, Table({{"/c", PythonModules{}}}));
  EXPECT_THAT(chosen.path, IsEmpty());
  EXPECT_THAT(chosen.summary, HasSubstr("/a (next to the binary: not an executable)"));
  EXPECT_THAT(chosen.summary, HasSubstr("/c (python3 on PATH: has no jaxlib)"));
  EXPECT_THAT(chosen.summary, HasSubstr("--python="));
  EXPECT_THAT(chosen.colocated_off, HasSubstr("--python="));
}

TEST(ChooseWorkerPython, ANamedPythonThatFailsIsNotPassedOver) {
  WorkerPython chosen = ChooseWorkerPython(
      {{"/env", "$SWITCHYARD_WORKER_PYTHON"}, {"/good", "python3 on PATH"}},
      Table({{"/env", absl::UnavailableError("did not run: boom")}, {"/good", Everything()}}));
  EXPECT_THAT(chosen.path, IsEmpty());
  EXPECT_THAT(chosen.summary, HasSubstr("did not run: boom"));
}

TEST(ChooseWorkerPython, NoneTurnsBothOff) {
  WorkerPython chosen = ChooseWorkerPython({{kNoPython, "--python"}}, Table({}));
  EXPECT_THAT(chosen.path, IsEmpty());
  EXPECT_THAT(chosen.colocated_off, HasSubstr("--python=none"));
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
