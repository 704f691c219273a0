/// The error body every Belfry endpoint answers with: `{"error": {"code", "message"}}`.
public struct ErrorBody: Codable, Hashable, Sendable {
    public struct Detail: Codable, Hashable, Sendable {
        /// A stable, machine-readable code such as `not_editable`.
        public var code: String
        /// A sentence for people, naming the field and what was expected.
        public var message: String

        public init(code: String, message: String) {
            self.code = code
            self.message = message
        }
    }

    public var error: Detail

    public init(code: String, message: String) {
        self.error = Detail(code: code, message: message)
    }
}
