import SQLKit

extension SQLRow {
    /// A column that may be NULL: `nil`, or its value as `D`. Asked for as `D?` through the
    /// protocol's own `decode`, the drivers decode the optional through a nested decoder and
    /// dynamic casts for every value; fan-out and the queue read several such columns a
    /// recipient. Being the more specific overload, this one serves every `as: X?.self`.
    func decode<D: Decodable>(column: String, as type: D?.Type) throws -> D? {
        try decodeNil(column: column) ? nil : decode(column: column, as: D.self)
    }
}
