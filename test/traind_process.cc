#include "test/traind_process.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace traind::testing {

ProcessResult runTraind(const std::string& args) {
  const std::filesystem::path out = freshTempDir("process") / "output.txt";
  const std::string command = std::string("cd '") + TRAIND_SOURCE_DIR + "' && '" +
                              TRAIND_BINARY_DIR + "/daemon/traind' " + args + " > '" +
                              out.string() + "' 2>&1";
  const int status = std::system(command.c_str());
  ProcessResult result;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.output = readFile(out);
  return result;
}

std::filesystem::path freshTempDir(const std::string& name) {
  static int counter = 0;
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("traind-test-" + std::to_string(getpid()) + "-" + name + "-" +
                                     std::to_string(counter++));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::string readFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void writeFile(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

std::string replaceAll(std::string from, const std::string& what, const std::string& with) {
  for (size_t at = from.find(what); at != std::string::npos; at = from.find(what, at + with.size()))
    from.replace(at, what.size(), with);
  return from;
}

}  // namespace traind::testing
