import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The process's own figures for `/metrics`: CPU time, resident memory, open file descriptors,
/// when it started. Read from the kernel at each scrape.
package enum ProcessFigures {
    /// When the process started (close enough: when this type was first used, at start-up).
    static let startTime = Date().timeIntervalSince1970.rounded()

    /// CPU time the process has used, user and system, in seconds.
    package static var cpuSeconds: Double {
        var usage = rusage()
        #if canImport(Glibc)
            getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
        #else
            getrusage(RUSAGE_SELF, &usage)
        #endif
        func seconds(_ time: timeval) -> Double { Double(time.tv_sec) + Double(time.tv_usec) / 1e6 }
        return seconds(usage.ru_utime) + seconds(usage.ru_stime)
    }

    /// From `/proc/self/statm` (pages); `nil` where there is no `/proc`.
    static var residentBytes: Double? {
        guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return nil }
        let fields = text.split(separator: " ")
        guard fields.count > 1, let pages = Double(fields[1]) else { return nil }
        return pages * Double(sysconf(Int32(_SC_PAGESIZE)))
    }

    /// The entries of `/proc/self/fd`; `nil` where there is no `/proc`.
    static var openFileDescriptors: Int? {
        (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")).map(\.count)
    }

    static var maxFileDescriptors: Double {
        var limit = rlimit()
        #if canImport(Glibc)
            getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit)
        #else
            getrlimit(RLIMIT_NOFILE, &limit)
        #endif
        return Double(limit.rlim_cur)
    }
}
