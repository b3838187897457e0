#include "server/http/own_fds.h"

#include <dirent.h>
#include <netinet/in.h>

#include <cstdlib>

namespace kvlm {

int socket_port(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
  if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
  return -1;
}

int visit_own_fds(const std::function<bool(int fd)>& visit) {
  int found = -1;
#if defined(__linux__)
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  while (const dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == dirfd(dir)) continue;
    if (visit(static_cast<int>(fd))) {
      found = static_cast<int>(fd);
      break;
    }
  }
  closedir(dir);
#else
  (void)visit;
#endif
  return found;
}

}  // namespace kvlm
