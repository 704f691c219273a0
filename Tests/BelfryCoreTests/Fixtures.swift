import BelfryCore
import Foundation

/// Test fixtures shipped as resources of this test target.
enum Fixtures {
    static func data(_ name: String) throws -> Data {
        guard let url = Bundle.module.url(forResource: name, withExtension: "json", subdirectory: "Fixtures") else {
            throw CocoaError(.fileNoSuchFile, userInfo: [NSFilePathErrorKey: name])
        }
        return try Data(contentsOf: url)
    }

    /// `workspace-read-valid.json`, read the way the server reads config files.
    static func workspace() throws -> WorkspaceConfig {
        try WorkspaceConfig.decodeFile(data("workspace-read-valid"))
    }
}
