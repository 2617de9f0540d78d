// Byte streams to a Session runtime, as line-oriented duplex connections: a unix socket, a child
// process (stdin/stdout), and (kube.hpp) a Kubernetes exec WebSocket. A Connection knows nothing of
// what the lines mean. Its reader runs continuously and queues lines on our side (bounded by bytes),
// so the runtime's 256-event subscriber bound is never hit because a caller is slow.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sessionturn/context.hpp"
#include "sessionturn/error.hpp"
#include "sessionturn/protocol.hpp"

namespace sessionturn {

// The strand an operation runs on (internal: src/conn/operation_strand.hpp).
struct OperationStrand;

// Default bound of the lines queued on our side before the consumer takes them. Beyond it the
// connection fails with Errc::too_large rather than grow without limit.
inline constexpr std::size_t kDefaultMaxQueuedBytes = 64u << 20;
// How much of a child's stderr (or the exec stderr channel) is kept for error messages.
inline constexpr std::size_t kDiagnosticsTailBytes = 4096;

struct ConnectionLimits {
  std::size_t max_line = kMaxLineBytes;
  std::size_t max_queued_bytes = kDefaultMaxQueuedBytes;
};

// One connection. All handlers run on the Context's workers. Thread-safety: the methods may be
// called from any thread; handlers of one connection never run concurrently with each other.
class Connection {
 public:
  using LineHandler = std::function<void(Result<std::string> line)>;
  using WriteHandler = std::function<void(Status status)>;

  virtual ~Connection() = default;

  // Delivers the next line (without its newline; blank lines already skipped). At most one read
  // outstanding. When the stream ends the handler gets an error: Errc::connection_lost naming the
  // cause (EOF, reset, process exit code, exec status), Errc::too_large when the queue bound was
  // exceeded, Errc::cancelled after Close().
  virtual void AsyncReadLine(LineHandler handler) = 0;

  // The next line already queued on our side, without waiting; nothing when there is none (or an end
  // to report: AsyncReadLine reports it), when a read is outstanding, or when not called from the
  // connection's own strand (Connector::AsyncConnectOn). A consumer on that strand takes the lines of
  // one socket read in one go this way. The default never has one.
  virtual std::optional<std::string> TryReadLine() { return std::nullopt; }

  // Writes `line` followed by '\n'. Writes are performed in call order. `done` may be empty.
  virtual void AsyncWrite(std::string line, WriteHandler done) = 0;

  // Closes now. Pending and later operations complete with Errc::cancelled. Idempotent.
  virtual void Close() = 0;

  // The tail (<= 4 KiB) of what the transport said on the side: a child's stderr, the exec stderr
  // channel. Attach it to errors.
  virtual std::string Diagnostics() const = 0;

  // "unix:/tmp/s.sock", "exec:kubectl exec ...", "kube-exec:ns/pod".
  virtual std::string Describe() const = 0;

  // Writes `lines`, each followed by '\n', in order, as if by one AsyncWrite per line with no
  // handler: a failed write is the stream's to report (its read fails too). The socket connections
  // send them in one write(2) when nothing is queued before them (a turn's subscribe and message).
  // The default calls AsyncWrite per line, so a wrapper that only overrides AsyncWrite sees each.
  // (Declared last: the slots of the functions above stay where they were.)
  virtual void AsyncWriteLines(std::vector<std::string> lines) {
    for (auto& line : lines) AsyncWrite(std::move(line), {});
  }
};

// Makes (and re-makes, for reconnects) a connection to one runtime.
class Connector {
 public:
  using ConnectHandler = std::function<void(Result<std::shared_ptr<Connection>> connection)>;
  virtual ~Connector() = default;
  virtual void AsyncConnect(ConnectHandler handler) = 0;
  // Connects with the connection's I/O and its handlers (and `handler`) on the strand of the operation
  // that connects, which may belong to an io_context other than the Context's: a blocking call's
  // private loop, run by the calling thread (Driver::SubmitTurn and the other blocking verbs do their
  // I/O there, with no thread hand-off). The unix connector and the local backend's do so: one strand
  // per turn, shared with its connection. OperationStrand is internal (src/conn/operation_strand.hpp);
  // the default ignores it and connects on the Context, which is correct (the caller binds every
  // handler to its own strand) at the price of a thread hand-off per callback.
  virtual void AsyncConnectOn(const OperationStrand& strand, ConnectHandler handler) {
    (void)strand;
    AsyncConnect(std::move(handler));
  }
  // True when AsyncConnectOn runs the connection on the strand it is given; then a blocking Driver
  // call runs its operation on a private loop on the calling thread.
  virtual bool ConnectsOnStrand() const { return false; }
  virtual std::string Describe() const = 0;
};

// A unix-domain stream socket at `path`.
std::shared_ptr<Connector> MakeUnixConnector(Context& context, std::string path, ConnectionLimits limits = {});

// A child process run from `argv` (no shell): its stdin/stdout are the stream, its stderr is kept as
// diagnostics. The process is killed (SIGTERM, then SIGKILL) and reaped when the connection closes.
std::shared_ptr<Connector> MakeProcessConnector(Context& context, std::vector<std::string> argv,
                                                ConnectionLimits limits = {});

}  // namespace sessionturn
